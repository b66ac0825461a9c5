"""The way on from a release answer: the clone the commit step needs, and the compare link (issue 23 item 7)."""

from __future__ import annotations

import io
from dataclasses import replace
from datetime import datetime, timezone

from rich.console import Console

from conftest import make_case
from dsbisect.render import nextstep
from dsbisect.render import report as rep
from dsbisect.core.model import Answer, RegressOn
from dsbisect.records.results import CommitResult, Request, Result

WHEN = datetime(2026, 3, 10, 12, 0, tzinfo=timezone.utc)


def _found(tmp_path, package="deepspeed", good="0.18.6", bad="0.18.7", **req) -> Result:
    r = Request(package=package, good="0.18.0", bad="0.19.0", case=make_case(tmp_path), regress_on=RegressOn.ANY, **req)
    return Result(r, ("0.18.0", good, bad, "0.19.0"), (), Answer.FOUND, good, bad)


def test_a_found_release_pair_gets_the_clone_the_rerun_and_the_compare_link(tmp_path):
    cmd = "dsbisect bisect deepspeed 0.18.0 0.19.0 --case x"
    step = nextstep.next_step(_found(tmp_path), cmd, WHEN)
    assert step.clone == ("git clone --filter=blob:none --shallow-since=2026-02-08 "
                          "https://github.com/deepspeedai/DeepSpeed")  # 30 days before the last good release
    assert step.rerun == cmd + " --git-repo DeepSpeed"  # the folder git clone makes
    assert step.compare == "https://github.com/deepspeedai/DeepSpeed/compare/v0.18.6...v0.18.7"
    hf = nextstep.next_step(_found(tmp_path, "Transformers", "4.57.1", "4.57.2"), "dsbisect bisect x", WHEN)
    assert hf.compare == "https://github.com/huggingface/transformers/compare/v4.57.1...v4.57.2"


def test_the_repo_goes_before_the_jobs_own_command_line(tmp_path):
    cmd = "dsbisect bisect deepspeed 0.18.0 0.19.0 -- torchrun --nproc-per-node 2 'my train.py' -- x"
    step = nextstep.next_step(_found(tmp_path), cmd, None)
    assert step.rerun == ("dsbisect bisect deepspeed 0.18.0 0.19.0 --git-repo DeepSpeed -- torchrun "
                          "--nproc-per-node 2 'my train.py' -- x")
    assert step.clone == "git clone --filter=blob:none https://github.com/deepspeedai/DeepSpeed"  # no date: all history


def test_an_unknown_package_gets_the_clone_without_a_guessed_url(tmp_path):
    step = nextstep.next_step(_found(tmp_path, "dsb-toy", "1.2.0", "1.3.0"), "dsbisect bisect dsb-toy 1 2", WHEN)
    assert step.clone == "git clone --filter=blob:none --shallow-since=2026-02-08 <the dsb-toy repository>"
    assert step.compare == "" and not any("compare" in ln for ln in nextstep.lines(step))


def test_no_next_step_without_a_pair_or_after_a_commit_step(tmp_path):
    found = _found(tmp_path)
    assert nextstep.next_step(replace(found, verdict=Answer.AMBIGUOUS), "c", WHEN) is None
    assert nextstep.next_step(replace(found, verdict=Answer.NOT_REPRODUCED, first_bad=""), "c", WHEN) is None
    commit = CommitResult("a" * 40, "b" * 40, "subject", (), 3, Answer.FOUND)
    assert nextstep.next_step(replace(found, commit=commit), "c", WHEN) is None
    assert nextstep.next_step(replace(found, commit_message="commit step: the merge base failed"), "c", WHEN) is None
    with_repo = replace(found, request=replace(found.request, git_repo=tmp_path))
    assert nextstep.next_step(with_repo, "c", WHEN) is None


def test_the_table_and_the_markdown_show_it_under_the_command(tmp_path):
    result = _found(tmp_path)
    step = nextstep.next_step(result, "dsbisect bisect deepspeed 0.18.0 0.19.0", WHEN)
    md = rep.bisect_markdown(result, "dsbisect bisect deepspeed 0.18.0 0.19.0", step)
    assert ("Next: find the commit\n\n```bash\ngit clone --filter=blob:none --shallow-since=2026-02-08 "
            "https://github.com/deepspeedai/DeepSpeed\ndsbisect bisect deepspeed 0.18.0 0.19.0 --git-repo DeepSpeed\n```") in md
    assert "Changes between the releases: https://github.com/deepspeedai/DeepSpeed/compare/v0.18.6...v0.18.7" in md
    assert md.index("Reproduce with:") < md.index("Next: find the commit")
    assert "Next:" not in rep.bisect_markdown(result, "c")  # only when given
    console = Console(width=80, record=True, soft_wrap=True, file=io.StringIO(), color_system=None)  # as the CLI
    console.print(rep.bisect_renderable(result, "dsbisect bisect deepspeed 0.18.0 0.19.0", piped=True, after=step))
    text = console.export_text().splitlines()
    assert "  git clone --filter=blob:none --shallow-since=2026-02-08 https://github.com/deepspeedai/DeepSpeed" in text
    assert "  dsbisect bisect deepspeed 0.18.0 0.19.0 --git-repo DeepSpeed" in text  # whole, when piped
