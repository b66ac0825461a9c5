"""A toy package's repository with a real history, as a maintainer's nightly meets it.

``dsb-nightly`` (import name ``dsb_nightly``, a src layout) has three functions and a test each
(``tests/test_add.py``, ``tests/test_noisy.py``, ``tests/test_settle.py``).  From the last green
commit to HEAD, first-parent, with harmless commits between:

- ``regression``: ``add`` is off by one (a plain failure, squash-merged as ``(#101)``);
- ``flaky``: ``noisy`` fails every other run, the first included (a counter file in
  ``$DSB_NIGHTLY_DRAWS``, so that the sequence is the same every time: one run may pass, two in a
  row never both do);
- ``hang``: ``settle`` takes a lock it already holds (the process never ends; the case's idle limit,
  30 s without output, a moving stack or CPU, tells it from a slow run on a loaded machine).

A ``dsbisect.yaml`` at the root holds the cases (``command:`` lines, the repository's folder as
their working folder) with ``build_pins: []`` so that a commit builds offline with the base's
setuptools.  Nothing here imports torch: a run is a python process and pytest.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "dsb-nightly"
version = "2.0.0"

[tool.setuptools.packages.find]
where = ["src"]
"""

CORE_OK = {
    "add": "def add(a, b):\n    return a + b\n",
    "noisy": "def noisy():\n    return True\n",
    "settle": "def settle():\n    return 'settled'\n",
}
CORE_BAD = {
    "add": "def add(a, b):\n    return a + b + 1  # the regression\n",
    "noisy": '''def noisy():
    import os
    folder = os.environ.get("DSB_NIGHTLY_DRAWS")
    path = os.path.join(folder, "noisy") if folder else None
    n = (int(open(path).read()) if path and os.path.exists(path) else 0) + 1
    if path:
        open(path, "w").write(str(n))
    if n % 2 == 1:
        raise RuntimeError("noisy: the reduction lost a term (now and then)")
    return True
''',
    "settle": '''def settle():
    import threading
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()  # the hang: a lock it already holds
    return 'settled'
''',
}
TESTS = {
    "add": "from dsb_nightly.add import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n",
    "noisy": "from dsb_nightly.noisy import noisy\n\n\ndef test_noisy():\n    assert noisy()\n",
    "settle": "from dsb_nightly.settle import settle\n\n\ndef test_settle():\n    assert settle() == 'settled'\n",
}
MATRIX = """\
defaults:
  nproc: 1
  accelerator: cpu
  build_pins: []
  timeout: {timeout}
axes:  # what `dsbisect run` would take; a --commits search builds each commit instead
  dsb-nightly: ["2.0.0"]
cases:
  add: {{command: [python, -m, pytest, -q, -p, no:cacheprovider, tests/test_add.py]}}
  noisy: {{command: [python, -m, pytest, -q, -p, no:cacheprovider, tests/test_noisy.py]}}
  settle:  # a hang is a run that sits still: silent, no stack moving, no CPU (a slow run on a loaded machine is none)
    command: [python, -m, pytest, -q, -p, no:cacheprovider, tests/test_settle.py]
    idle_timeout: 30
  add_on_gpus:  # the same test, on 2 CUDA GPUs: on a machine without them, every point is the machine's skip
    command: [python, -m, pytest, -q, -p, no:cacheprovider, tests/test_add.py]
    accelerator: cuda
    nproc: 2
"""


def git(repo: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="Ada Lovelace", GIT_AUTHOR_EMAIL="ada@example.org",
               GIT_COMMITTER_NAME="Ada Lovelace", GIT_COMMITTER_EMAIL="ada@example.org")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def commit(repo: Path, message: str, files: dict[str, str] | None = None) -> str:
    """A commit of ``files`` (with none: a harmless new note)."""
    if files is None:
        n = len(list((repo / "notes").glob("*"))) if (repo / "notes").is_dir() else 0
        files = {f"notes/{n}.md": message + "\n"}
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def make(repo: Path, timeout: float = 300.0) -> dict[str, str]:
    """The toy's repository at ``repo``, its ``origin`` a bare repository beside it (what the
    workflow pushes its tag to); the hashes by name (``green``, ``regression``, ``flaky``, ``hang``,
    ``head``).  The last green commit is tagged ``nightly-last-green`` (locally and on origin)."""
    origin = repo.with_name(repo.name + "-origin.git")
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "remote", "add", "origin", str(origin))
    files = {"pyproject.toml": PYPROJECT, "dsbisect.yaml": MATRIX.format(timeout=timeout),
             "src/dsb_nightly/__init__.py": '"""dsb-nightly: a toy for dsbisect\'s nightly."""\n',
             ".gitignore": "__pycache__/\n*.egg-info/\nbuild/\n"}
    files |= {f"src/dsb_nightly/{n}.py": text for n, text in CORE_OK.items()}
    files |= {f"tests/test_{n}.py": text for n, text in TESTS.items()}
    h = {"green": commit(repo, "Start dsb-nightly", files)}
    git(repo, "tag", "nightly-last-green")
    commit(repo, "Docs: the add function")
    h["regression"] = commit(repo, "Speed up add (#101)", {"src/dsb_nightly/add.py": CORE_BAD["add"]})
    commit(repo, "Docs: the noisy function")
    h["flaky"] = commit(repo, "Reduce in place\n\nPR: #102", {"src/dsb_nightly/noisy.py": CORE_BAD["noisy"]})
    commit(repo, "Docs: a note")
    h["hang"] = commit(repo, "Settle under a lock (#103)", {"src/dsb_nightly/settle.py": CORE_BAD["settle"]})
    h["head"] = commit(repo, "Docs: the release notes")
    git(repo, "push", "-q", "origin", "main", "nightly-last-green")
    return h
