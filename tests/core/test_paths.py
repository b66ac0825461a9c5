"""Paths as a published report shows them (core.paths): relative to the working folder inside
it, ~/... under the home, else the last components after a placeholder; never a home or a
temporary folder's path, whatever text they stand in."""

from __future__ import annotations

import pytest

from dsbisect.core.paths import shown_path, unlocal

# A made-up user's layout, built from the root of home folders (no machine's own path).
HOMES = "/" + "home"
HOME = f"{HOMES}/alice"
CWD = f"{HOME}/code/proj"


@pytest.mark.parametrize("path, shown", [
    (f"{CWD}/train.py", "train.py"),
    (CWD, "."),
    (f"{CWD}/../other/ds.json", "~/code/other/ds.json"),
    (f"{HOME}/.cache/dsbisect/envs/ab12/bin/python", "~/.cache/dsbisect/envs/ab12/bin/python"),
    (f"{HOMES}/bob/src/DeepSpeed/deepspeed/runtime/engine.py", "…/runtime/engine.py"),  # another's home
    ("/tmp/pytest-of-alice/pytest-3/cache0/envs/x/lib/site.py", "…/lib/site.py"),
    ("/tmp/scratch1/wh", "…/scratch1/wh"),
    ("/usr/lib/python3.12/site-packages/torch/distributed/c10d.py", "…/site-packages/torch/distributed/c10d.py"),
    ("/tmp/cache/envs/ab12/lib/python3.12/site-packages/deepspeed/runtime/engine.py",
     "…/site-packages/deepspeed/runtime/engine.py"),
    ("/usr/share/doc/python3/README", "…/python3/README"),
    ("/opt/wheels", "/opt/wheels"),  # a short system path names no one's layout
    ("/dev/shm", "/dev/shm"),
    ("relative/path.py", "relative/path.py"),
])
def test_one_path(path, shown):
    assert shown_path(path, CWD, HOME) == shown


def test_a_root_working_folder_is_no_licence_to_show_everything():
    assert shown_path("/tmp/x/y/z.py", "/", HOME) == "…/y/z.py"


def test_every_path_in_a_text_and_nothing_else():
    text = (f'python 3.12.3 ({CWD}/.venv/bin/python3); find-links /tmp/tmpab12/wh /opt/wheels '
            f'--cache-dir=/tmp/tmpab12/cache; File "{CWD}/check.py", line 10; '
            f'https://pypi.org/simple/deepspeed/ file://{HOMES}/bob/house/x.whl and/or 12/05 /dev/shm 24 GiB')
    shown = unlocal(text, CWD, HOME)
    assert shown == ('python 3.12.3 (.venv/bin/python3); find-links …/tmpab12/wh /opt/wheels '
                     '--cache-dir=…/tmpab12/cache; File "check.py", line 10; '
                     'https://pypi.org/simple/deepspeed/ file://…/house/x.whl and/or 12/05 /dev/shm 24 GiB')
    assert "/home/" not in shown and "/tmp/" not in shown
