"""The culprit's pull request from its commit message, the repository's web address from a
remote, and the regression's stable key (pure)."""

from __future__ import annotations

import pytest

from dsbisect.core.model import Outcome
from dsbisect.records.migrate import failure
from dsbisect.records.forge import Culprit, issue_key, pull_request, pull_url, web_url
from dsbisect.verdict.identity import Identity, learn


@pytest.mark.parametrize("message, number", [
    ("Fix the allreduce bucket (#4321)", 4321),  # a squash merge
    ("Fix the allreduce bucket (#4321)\n\nCo-authored-by: x <x@y>", 4321),
    ("Merge pull request #77 from someone/branch\n\nFix it", 77),  # a merge commit
    ("Reduce in place\n\nPR: #102", 102),  # trailers
    ("Reduce in place\n\nPull-Request: https://github.com/o/r/pull/55", 55),
    ("Reduce in place\n\nPR-URL: https://github.com/o/r/pull/56\nSigned-off-by: a <b@c>", 56),
    ("Reviewed-on: https://git.example.org/o/r/pulls/9 in the subject is no trailer", None),
    ("Bump to 1.2 (see #12 for why)", None),  # a mention is not the PR it came from
    ("Fix #12", None),
    ("", None),
    ("Release notes\n\nThis fixes (#12) and more", None),
])
def test_the_pull_request_of_a_commit(message, number):
    assert pull_request(message) == number


@pytest.mark.parametrize("remote, url", [
    ("git@github.com:deepspeedai/DeepSpeed.git", "https://github.com/deepspeedai/DeepSpeed"),
    ("https://github.com/huggingface/accelerate.git", "https://github.com/huggingface/accelerate"),
    ("https://user:tok3n@github.com/o/r", "https://github.com/o/r"),  # credentials never kept
    ("ssh://git@gitlab.example.org:2222/group/sub/r.git", "https://gitlab.example.org/group/sub/r"),
    ("/srv/git/r.git", None),
    ("../r", None),
    ("file:///srv/git/r.git", None),
    ("", None),
])
def test_the_web_address_of_a_remote(remote, url):
    assert web_url(remote) == url


def test_the_culprit_links_its_pull_request_or_its_commit():
    repo = "https://github.com/o/r"
    c = Culprit("a" * 40, "Speed up add (#101)", "Ada", 101, pull_url(repo, 101), repo)
    assert c.link() == "[#101](https://github.com/o/r/pull/101)"
    assert Culprit("a" * 40, "x", repo_url=repo).link() == f"[`{'a' * 10}`]({repo}/commit/{'a' * 40})"
    assert Culprit("a" * 40, "x").link() == f"`{'a' * 10}`" and pull_url(None, 3) is None


def _fail(reason: str, frames=()) -> Identity:
    return learn(Outcome.FAIL, failure=failure(reason), frames=tuple(frames))


def test_the_key_is_the_regression_not_the_commit_or_the_night():
    a = issue_key("DeepSpeed", "pytest tests/x.py", _fail("RuntimeError: bucket 3 of 12 lost", ["ds/zero.py:step"]),
                  "fail")
    # the same failure with other numbers, another night, another culprit commit: the same key
    assert a == issue_key("deepspeed", "pytest tests/x.py", _fail("RuntimeError: bucket 5 of 7 lost",
                                                                  ["ds/zero.py:step"]), "fail")
    assert a.startswith("dsbisect-") and len(a) == len("dsbisect-") + 16
    others = {
        issue_key("deepspeed", "pytest tests/y.py", _fail("RuntimeError: bucket 3 of 12 lost", ["ds/zero.py:step"]),
                  "fail"),  # another test
        issue_key("deepspeed", "pytest tests/x.py", _fail("ValueError: bucket 3 of 12 lost", ["ds/zero.py:step"]),
                  "fail"),  # another exception
        issue_key("deepspeed", "pytest tests/x.py", _fail("RuntimeError: bucket 3 of 12 lost", ["ds/comm.py:reduce"]),
                  "fail"),  # another place
        issue_key("transformers", "pytest tests/x.py", _fail("RuntimeError: bucket 3 of 12 lost",
                                                             ["ds/zero.py:step"]), "fail"),
        issue_key("deepspeed", "pytest tests/x.py", None, "hang"),
    }
    assert a not in others and len(others) == 5
    # without frames, the normalised message tells failures apart
    assert issue_key("p", "t", _fail("KeyError: 'a'"), "fail") != issue_key("p", "t", _fail("KeyError: 'b'"), "fail")
