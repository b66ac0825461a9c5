"""A number bisected down to the commit (``--metric`` with ``--git-repo``, issue 38), and the
revert proof of a number: a toy package's git history in which a commit changes the loss it
reports, searched commit by commit as the releases are (one rank, no launcher); the reverted
release recovers the loss (proven) or, where a later commit also moved it, does not (not
sufficient).  Fast: the proof's rule on literal samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import toypkg
from conftest import commit, git, pyproject, write_matrix
from dsbisect.bisect.numcommits import proof_call
from dsbisect.core.metric import parse_metric
from dsbisect.records.proof import ProofVerdict
from dsbisect.verdict.numbers import Judge

# the loss a run reports at step 5: a.LOSS + b.EXTRA, in the file dsbisect passes in DSBISECT_METRICS
INIT = '''__version__ = "{version}"
from . import a, b


def step(dist):
    import json, os
    with open(os.environ["DSBISECT_METRICS"], "a") as f:
        f.write(json.dumps({{"step": 5, "loss": a.LOSS + b.EXTRA, "rank": dist.get_rank()}}) + "\\n")
    dist.barrier()
'''
A, B, INIT_PY = "dsb_toy/a.py", "dsb_toy/b.py", "dsb_toy/__init__.py"


def history(repo: Path, twice: bool) -> dict[str, str]:
    """v1.0.0 (loss 1.5), a harmless commit, the bug (a: loss 1.75), with ``twice`` a later commit
    that adds 0.25 in b, a harmless commit, v1.1.0."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    h = {"v1.0.0": commit(repo, "release 1.0.0", {"pyproject.toml": pyproject("dsb-gittoy", "1.0.0", "dsb_toy"),
                                                   INIT_PY: INIT.format(version="1.0.0"), A: "LOSS = 1.5\n",
                                                   B: "EXTRA = 0.0\n", "NOTES.md": "notes\n"})}
    git(repo, "tag", "v1.0.0")
    h["bump"] = commit(repo, "Bump to 1.1.0", {"pyproject.toml": pyproject("dsb-gittoy", "1.1.0", "dsb_toy"),
                                                INIT_PY: INIT.format(version="1.1.0")})
    h["bug"] = commit(repo, "a: a larger loss (the bug)", {A: "LOSS = 1.75\n"})
    if twice:
        h["again"] = commit(repo, "b: a larger loss too", {B: "EXTRA = 0.25\n"})
    h["after"] = commit(repo, "Docs", {"NOTES.md": "more notes\n"})
    git(repo, "tag", "-a", "-m", "release 1.1.0", "v1.1.0")
    return h


def _bisect(cli, tmp_path: Path, cache_dir, repo: Path, *extra):
    house = tmp_path / "house"
    toypkg.build_wheelhouse(house, {"1.0.0": "loss1", "1.1.0": "loss2"}, dist="dsb-gittoy")
    write_matrix(tmp_path, ["1.0.0"], package="dsb-gittoy", collective_timeout=30, nproc=1)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(matrix.read_text().replace("defaults:\n", "defaults:\n  build_pins: []\n"))
    return cli("bisect", "dsb-gittoy", "1.0.0", "1.1.0", "--case", "toy", "--git-repo", str(repo), "--offline",
               "--metric", "loss@step5", "--worse-if", "differs by 1%", "--find-links", str(house),
               "--cache-dir", str(cache_dir), "-q", *extra, cwd=tmp_path)


@pytest.mark.slow
def test_a_loss_is_bisected_to_its_commit_and_the_revert_recovers_it(tmp_path, cli, cache_dir):
    h = history(tmp_path / "clone", twice=False)
    res = _bisect(cli, tmp_path, cache_dir, tmp_path / "clone", "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["verdict"], out["last_good"], out["first_bad"]) == ("found", "1.0.0", "1.1.0")
    assert out["commit"]["first_bad"] == h["bug"] and out["commit"]["last_good"] == h["bump"]
    commit = out["numbers"]["commit"]
    by = {p["label"]: p for p in commit["points"]}
    assert by[h["bug"][:10]]["median"] == 1.75 and by[h["bug"][:10]]["call"] == "worse"
    assert by[h["v1.0.0"][:10]]["median"] == 1.5
    assert f"commit {h['bug'][:10]}" in out["numbers"]["answer"]
    proof = out["proof"]
    assert proof["verdict"] == "proven" and proof["numbers"]["median"] == 1.5, proof
    assert proof["numbers"]["call"] == "not-worse" and proof["runs"] >= 2
    assert "loss@step5 1.5" in proof["detail"]
    (step,) = [s for s in out["steps"] if s["stage"] == "prove"]
    assert step["verdict"] == "good" and step["run_ids"] == proof["run_ids"]
    # the commit stage's steps carry the commits; the table says the proof in one line
    assert {s["commit"] for s in out["steps"] if s["stage"] == "commit"} >= {h["bug"], h["bump"]}
    table = _bisect(cli, tmp_path, cache_dir, tmp_path / "clone")
    assert table.exit_code == 0, table.output
    assert "the number recovers: the commit is the cause" in table.stdout


@pytest.mark.slow
def test_a_commit_whose_revert_does_not_recover_the_number_is_not_sufficient(tmp_path, cli, cache_dir):
    h = history(tmp_path / "clone", twice=True)
    res = _bisect(cli, tmp_path, cache_dir, tmp_path / "clone", "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["commit"]["first_bad"] == h["bug"]  # the first of the two steps over the threshold
    assert out["numbers"]["commit"]["shape"] == "steps"
    proof = out["proof"]
    assert proof["verdict"] == "not-sufficient" and proof["numbers"]["median"] == 1.75, proof
    assert proof["numbers"]["call"] == "worse"


LOSS = Judge(parse_metric("loss", "differs by 1%"))
TIME = Judge(parse_metric("step_time", "higher by 10%"))


@pytest.mark.parametrize("judge, good, reverted, reference, left, expected", [
    (LOSS, [1.5], [1.5], [1.5] * 3, True, None),  # one run of the reverted tree is not enough
    (LOSS, [1.5], [1.5, 1.5], [1.5] * 3, True, ProofVerdict.PROVEN),  # exact: equal values
    (LOSS, [1.5], [1.75, 1.75], [1.5] * 3, True, ProofVerdict.NOT_SUFFICIENT),
    (LOSS, [1.5], [1.5], [1.5] * 3, False, ProofVerdict.UNTESTABLE),  # its cap, one run
    (TIME, [1.0, 1.02, 0.98], [1.5, 1.49], [1.0, 1.02, 0.98], True, None),  # noisy: 2 runs cannot tell
    (TIME, [1.0, 1.02, 0.98, 1.01, 0.99], [1.5, 1.49, 1.52, 1.51, 1.48], [1.0, 1.02, 0.98], True,
     ProofVerdict.NOT_SUFFICIENT),
    (TIME, [1.0, 1.02, 0.98, 1.01, 0.99], [1.0, 0.99, 1.01, 1.02, 0.98], [1.0, 1.02, 0.98], True,
     ProofVerdict.PROVEN),
    (TIME, [1.0, 1.02, 0.98], [1.5, 1.49], [1.0, 1.02, 0.98], False, ProofVerdict.UNTESTABLE),
])
def test_the_proof_of_a_number(judge, good, reverted, reference, left, expected):
    assert proof_call(judge, good, reverted, reference, left) is expected
