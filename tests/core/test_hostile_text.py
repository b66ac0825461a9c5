"""Text that came from outside (rank output, reasons, stacks, commit subjects, case names,
paths) is inert on a terminal and in Markdown, and never rich markup.

Every renderer gets the same hostile strings: escape sequences that set the terminal title,
hide a hyperlink, clear the screen, move the cursor up and erase the verdict line, a carriage
return that rewrites a line, C1 controls and a bidi override; and brackets rich would read as
markup.  Each must come out visibly (``\\x1b[2J`` as text) and whole, and no control
character may reach the output.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from conftest import make_case, offline, write_matrix
from rich.console import Console

from dsbisect.render import report as rep
from dsbisect.records.run import RunFacts
from dsbisect.records.results import Request, Result, Step
from dsbisect.core.model import Answer, Outcome, Point, RegressOn, Stage, Verdict
from dsbisect.store.store import Store

ESCAPES = [
    "\x1b]0;pwned title\x07",  # the terminal's title
    "\x1b]8;;http://evil.example/\x1b\\click here\x1b]8;;\x1b\\",  # a hidden hyperlink
    "\x1b[2J\x1b[H",  # clear screen, cursor home
    "\x1b[1A\x1b[2K✅ PASS (faked)",  # cursor up + erase line: rewrites the verdict above
    "was FAIL\rnow PASS",  # a carriage return rewriting the line
    "\x9b31m C1 CSI\x85",  # C1 controls
    "\u202eevil bidi",  # a right-to-left override
]
MARKUP = ["[/]", "searched [/opt/foo/lib, /usr/lib]", "[zero] fix", "a[bold]b", "[link=http://evil]click",
          ":thumbs_up: [red]x[/red]"]
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def visible(s: str) -> str:
    """How a hostile string must be shown: each control character as its escape, as text."""
    return "".join(f"\\x{ord(c):02x}" if (ord(c) < 0x20 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f
                   else f"\\u{ord(c):04x}" if 0x202a <= ord(c) <= 0x202e else c for c in s)


def rendered(renderable, terminal: bool = True) -> str:
    """What a console writes, byte for byte (no colours, so every escape in it came from the text)."""
    buf = io.StringIO()
    Console(file=buf, width=400, force_terminal=terminal, color_system=None, soft_wrap=True).print(renderable)
    return buf.getvalue()


def assert_inert(out: str, texts: list[str]) -> None:
    assert not CONTROL.findall(out), CONTROL.findall(out)
    for t in texts:
        assert visible(t) in out, (t, out)


def _runs(st: Store, tmp_path: Path, hostile: str) -> list:
    """A failing and a hung run of a case named ``hostile``, with hostile reasons and logs."""
    out = []
    for version, outcome in (("1.0.0", Outcome.FAIL), ("1.1.0", Outcome.HANG)):
        rid = st.start_run(hostile, "k", Point(versions=(("dsb-toy", version),)), "env", 1)
        run_dir = Path(st.run(rid).run_dir)
        (run_dir / "ranks").mkdir()
        (run_dir / "ranks" / "rank0.log").write_text("\n".join(ESCAPES + MARKUP) + "\n")
        st.finish_run(rid, outcome, 1, 3.0, reason=f"RuntimeError: {hostile}", signature="",
                      facts=RunFacts.of(command=["python", hostile]))
        out.append(st.run(rid))
    return out


@pytest.mark.parametrize("hostile", ESCAPES + MARKUP)
def test_the_grid_shows_hostile_text_inert_on_a_terminal_a_pipe_and_in_markdown(tmp_path, hostile):
    g = rep.grid(_runs(Store(tmp_path / "st"), tmp_path, hostile))
    for terminal in (True, False):
        assert_inert(rendered(rep.grid_renderable(g, f"dsbisect run -- {hostile}"), terminal), [hostile])
    md = rep.grid_markdown(g, f"dsbisect run -- {hostile}")
    assert_inert(md, [])
    assert visible(hostile).replace("|", "\\|") in md
    assert not CONTROL.findall(json.dumps(rep.grid_json(g)))  # as the CLI writes it


@pytest.mark.parametrize("hostile", ESCAPES + MARKUP)
def test_show_shows_hostile_text_and_logs_inert(tmp_path, hostile):
    from dsbisect.render.show import render_run

    runs = _runs(Store(tmp_path / "st"), tmp_path, hostile)
    out = rendered(render_run(runs[0]))
    assert_inert(out, [hostile, *ESCAPES, *MARKUP])


def _bisection(tmp_path: Path, hostile: str) -> Result:
    st = Store(tmp_path / "st")
    good, bad = _runs(st, tmp_path, hostile)
    req = Request(package="dsb-toy", good="1.0.0", bad="1.1.0", case=make_case(tmp_path, name="c"),
                  regress_on=RegressOn.ANY)
    steps = (Step(Stage.RELEASE, "1.0.0", "1.0.0", None, "", Verdict.GOOD, (good,)),
             Step(Stage.COMMIT, "abc1234", "1.1.0", "abc1234" * 5, hostile, Verdict.BAD, (bad,)))
    return Result(req, ("1.0.0", "1.1.0"), steps, Answer.FOUND, "1.0.0", "1.1.0", message=hostile)


@pytest.mark.parametrize("hostile", ESCAPES + MARKUP)
def test_a_bisection_shows_commit_subjects_and_reasons_inert(tmp_path, hostile):
    result = _bisection(tmp_path, hostile)
    for terminal in (True, False):
        out = rendered(rep.bisect_renderable(result, f"dsbisect bisect -- {hostile}"), terminal)
        assert_inert(out, [hostile])
        assert f"abc1234 {visible(hostile)}" in out  # "[zero] fix" is not " fix"
    assert_inert(rep.bisect_markdown(result, f"dsbisect bisect -- {hostile}"), [])


def test_progress_lines_show_hostile_text_inert(capsys):
    from dsbisect.render.progress import ProgressUI

    ui = ProgressUI(total=2)
    for hostile in ESCAPES + MARKUP:  # a skip's reason: on main, "[/opt/…]" broke every later run
        ui("done", f"c · 1.0.0: skip ({hostile})")
        ui("note", hostile)
        ui("env", hostile)
    assert_inert(capsys.readouterr().err, ESCAPES + MARKUP)


@pytest.mark.parametrize("name", ["[/]", "[link=http://evil]click", "a[bold]b", "\x1b[2Jx", "[/opt/x, /usr/lib]"])
def test_a_hostile_case_name_is_one_plain_line_and_exit_2(tmp_path, cli, name):
    write_matrix(tmp_path, ["1.0.0"])
    res = cli("run", "matrix.yaml", "--case", name, "--store", str(tmp_path / "st"), cwd=tmp_path)
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1, res.output
    assert visible(name) in res.stderr and not CONTROL.findall(res.stderr)
    assert not (tmp_path / "st").exists()


def test_an_error_naming_a_hostile_path_is_shown_whole(tmp_path, cli):
    res = cli("report", "--store", str(tmp_path / "[/]" / "a[bold]b"), cwd=tmp_path)
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "[/]" in res.stderr and "a[bold]b" in res.stderr


# --------------------------------------------------------------- a real run

HOSTILE_RANK = r'''
import sys
print("\x1b]0;pwned\x07title set")
print("\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\")
print("\x1b[2J\x1b[Hscreen cleared")
sys.stdout.write("progress 10%\rprogress 100%\n")
print("\x1b[1A\x1b[2K")
print("ImportError: libfoo.so: cannot open (searched [/opt/foo/lib, /usr/lib]) \x1b[2K[/]", file=sys.stderr)
sys.exit(125)  # untestable: a skip, retried by every later run (on main, each then crashed on the brackets)
'''


@pytest.mark.slow
def test_a_run_that_prints_escapes_and_markup_is_shown_inert_by_every_command(tmp_path, cli, cache_dir, wheelhouse):
    """One real rank prints escapes and skips with markup in its reason; run (twice: the skip is
    retried), report, show and the Markdown all show it inert, and none crashes."""
    (tmp_path / "hostile.py").write_text(HOSTILE_RANK)
    args = ["--versions", "dsb-toy=1.0.0", "--nproc", "1", "--accelerator", "cpu", *offline(wheelhouse, cache_dir),
            "--store", str(tmp_path / "st")]
    outs = []
    for extra in ([], []):
        res = cli("run", *args, *extra, "--", "python", "hostile.py",
                  cwd=tmp_path)
        assert res.exit_code == 0, res.output
        outs.append(res.output)
    for command in (["report"], ["report", "--format", "markdown"], ["show", "1"], ["show", "2"]):
        res = cli(*command, "--store", str(tmp_path / "st"), cwd=tmp_path)
        assert res.exit_code == 0, res.output
        outs.append(res.output)
    shown = "\n".join(outs)
    assert not CONTROL.findall(shown), CONTROL.findall(shown)
    assert "[/opt/foo/lib, /usr/lib]" in shown and "\\x1b[2J" in shown
