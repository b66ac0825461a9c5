"""Issue 23 item 3: never silent.  The clock ticks on a timer, a piped run prints a heartbeat,
what is slow is said while it is slow (a just-in-time op build, a look-ahead venv), the range
and "both ends first" are said at the start, the time left is estimated from the rounds so far,
and a run's time is one figure wherever it is shown.
"""

from __future__ import annotations

import io
import json
import math
import re

import pytest
from rich.console import Console

import toypkg
from conftest import offline, write_matrix
from dsbisect.core import eta
from dsbisect.core.clock import ManualClock
from dsbisect.run import phases
from dsbisect.bisect.bisection import range_note, steps_for
from dsbisect.core.errors import InputError
from dsbisect.core.mode import Mode
from dsbisect.core.model import Stage
from dsbisect.render.progress import ProgressUI, heartbeat_seconds
from dsbisect.run.runner import env_line

# ------------------------------------------------------------------ eta (pure)


@pytest.mark.parametrize("s, shown", [(0.04, "0.0 s"), (9.54, "9.5 s"), (12.3, "12 s"), (16.4, "16 s"),
                                      (599, "599 s"), (600, "10 min"), (3725, "62 min"), (-1, "? s"),
                                      (math.nan, "? s")])
def test_a_runs_time_is_shown_one_way(s, shown):
    assert eta.seconds_text(s) == shown


def test_the_grid_shows_a_runs_time_as_progress_does():
    from dsbisect.render.gridmodel import run_time

    for s in (0.5, 9.99, 12.3, 16.0, 599.4, 601, 7200):
        assert run_time(s) == eta.seconds_text(s)


@pytest.mark.parametrize("s, shown", [(0, "0:00"), (7.9, "0:07"), (102, "1:42"), (3723, "1:02:03"), (-5, "0:00"),
                                      (math.inf, "0:00")])
def test_clock(s, shown):
    assert eta.clock(s) == shown


@pytest.mark.parametrize("rounds, left, expected", [
    ([], 3, None),  # nothing ran: no guess
    ([40.0], 0, None),  # nothing left
    ([40.0], 3, 120.0),
    ([300.0, 20.0, 24.0], 2, 48.0),  # the cold first round (venvs, op builds) does not set the pace
    ([300.0, 20.0], 1, 160.0),  # an even count: the middle two
    ([20.0, math.nan, -1.0, 30.0], 4, 100.0),  # what is no duration is left out
])
def test_time_left_is_the_median_round_times_the_rounds_left(rounds, left, expected):
    assert eta.time_left(rounds, left) == expected


@pytest.mark.parametrize("s, shown", [(None, ""), (3, "about 10 s"), (44, "about 40 s"), (61, "about 60 s"), (88, "about 90 s"), (131, "about 2 min"),
                                      (409, "about 7 min"), (3600, "about 1 h"), (4810, "about 1 h 20 min")])
def test_about(s, shown):
    assert eta.about(s) == shown


@pytest.mark.parametrize("left, width, steps", [(0, 1, 1), (1, 1, 1), (2, 1, 2), (3, 1, 2), (7, 1, 3), (8, 1, 4),
                                                (2, 2, 1), (8, 2, 2), (9, 2, 3), (100, 3, 4)])
def test_steps_for_a_search_of_width(left, width, steps):
    assert steps_for(left, width) == steps


def test_the_range_and_both_ends_first_are_said_before_anything_runs():
    labels = ["0.18.1", "0.18.2", "0.18.3", "0.18.4", "0.18.5", "0.18.6", "0.18.7"]
    assert range_note(labels, Stage.RELEASE, Mode.REGRESSION, 1) == (
        "7 releases from 0.18.1 to 0.18.7 (5 between them: about 3 steps after the ends); both ends first: "
        "0.18.1 (good) and 0.18.7 (bad)")
    assert range_note(labels[:2], Stage.RELEASE, Mode.FIND_FIX, 1) == (
        "2 releases from 0.18.1 to 0.18.2 (0 between them: no release between them); both ends first: "
        "0.18.1 (broken) and 0.18.2 (fixed)")
    assert range_note(["a1", "b2", "c3"], Stage.COMMIT, Mode.REGRESSION, 2).startswith(
        "3 commits from a1 to c3 (1 between them: about 1 step after the ends)")


# ------------------------------------------------------------ phases (pure + real files)


def test_an_op_build_is_said_once_its_lock_is_held_for_two_looks():
    none, held = phases.Builds(), phases.Builds(building=("deepspeed_shm_comm",))
    assert phases.next_phase("", held, none, none) == ""  # a moment's lock: torch checking a built op
    first = phases.next_phase("", held, held, none)
    assert first == "compiling DeepSpeed's shm_comm op (first run of this venv; later runs load it)"
    assert phases.next_phase(first, held, held, none) == ""  # said once
    built = phases.Builds(built=("deepspeed_shm_comm",))
    assert phases.next_phase(first, built, held, none) == "running (the op is built)"
    assert phases.next_phase("running (the op is built)", built, built, none) == ""
    again = phases.next_phase("", held, held, built)  # a library there before the run: a rebuild
    assert again.startswith("recompiling DeepSpeed's shm_comm op (its sources, torch or compiler changed)")
    mine = phases.Builds(building=("my_ext",))
    assert phases.next_phase("", mine, mine, none).startswith("compiling the my_ext extension")


def test_phase_watch_says_a_real_build_folder_s_phases(tmp_path):
    said: list[str] = []
    op = tmp_path / "deepspeed_shm_comm"
    clock = ManualClock()
    with phases.PhaseWatch(tmp_path, said.append, clock=clock):
        clock.sleepers(1)
        clock.advance(3)  # three looks
        assert said == []  # nothing to say about a run that builds nothing
        op.mkdir()
        (op / "lock").write_text("")
        clock.advance(1)
        assert said == []  # the lock held at one look only: torch takes it to find a built op, too
        clock.advance(1)
        assert len(said) == 1
        (op / "deepspeed_shm_comm.so").write_bytes(b"")
        (op / "lock").unlink()
        clock.advance(1)
    assert said == ["compiling DeepSpeed's shm_comm op (first run of this venv; later runs load it)",
                    "running (the op is built)"]


def test_phase_watch_says_this_run_s_shared_op_build_and_not_another_job_s(tmp_path):
    """Shared builds (the hook's dsbisect_ops, keyed by a digest) happen in <cache>/ops/<name>-<key>.tmp,
    not in the venv's torch_extensions; a rank that makes or waits for one leaves a claim in its run's
    folder (ops-building/<name>.<pid>), and only that is this run's phase: another job's build in the
    shared folder (a concurrent bisection; its .tmp folder) is not said -- a Transformers point with
    no DeepSpeed said "compiling DeepSpeed's shm_comm op" while a DeepSpeed bisection compiled."""
    said: list[str] = []
    venv_ext, shared, run_dir = tmp_path / "torch_extensions", tmp_path / "ops", tmp_path / "run"
    shared.mkdir()
    run_dir.mkdir()
    clock = ManualClock()
    with phases.PhaseWatch(venv_ext, said.append, run_dir, clock=clock):
        clock.sleepers(1)
        (shared / "deepspeed_shm_comm-4567ef01.tmp" / "build").mkdir(parents=True)  # another job's build
        clock.advance(3)
        assert said == []
        claim = run_dir / "ops-building" / "deepspeed_shm_comm.4242"
        claim.parent.mkdir()
        claim.write_text("")  # a rank of this run makes (or waits for) the shared build
        clock.advance(2)
        assert len(said) == 1
        claim.unlink()
        clock.advance(1)
    assert said[0].startswith("compiling DeepSpeed's shm_comm op")
    assert said[1] == "running (the op is built)"
    assert phases.look_claims(tmp_path / "missing") == phases.Builds()
    (run_dir / "ops-building" / "cpu_adam.7").write_text("")
    (run_dir / "ops-building" / "cpu_adam.8").write_text("")  # two ranks of one run: one op
    assert phases.look_claims(run_dir) == phases.Builds(building=("cpu_adam",))


def test_a_look_ahead_build_is_worded_as_one():
    assert env_line("building env 1a2b (dsb-toy==1.1.0)") == ("env", "building env 1a2b (dsb-toy==1.1.0)")


# ----------------------------------------------------------------- the display


def _piped() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=False, width=200, soft_wrap=True, markup=False, highlight=False), buf


def test_points_this_machine_cannot_run_are_no_part_of_the_time_left():
    """README command 1 on a CPU machine: 3 CPU points, then 15 that need GPUs. After the first
    point's 47 s, main said "[point 1 of 18] … about 16 min left" for what took 1.5 min."""
    def first_line(unrunnable: int) -> str:
        console, buf = _piped()
        ui = ProgressUI(total=6, heartbeat=0, console=console)
        ui.expect_unrunnable(unrunnable)
        ui.last_done -= 47  # the first point took 47 s
        ui("done", "cpu_smoke · 0.17.6: pass in 47 s")
        return buf.getvalue()
    assert "[point 1 of 6] cpu_smoke · 0.17.6: pass in 47 s · about 4 min left" in first_line(0)
    assert "· about 90 s left" in first_line(3)  # 2 more that run, 3 skipped at once
    console, buf = _piped()
    ui = ProgressUI(total=3, heartbeat=0, console=console)
    ui.expect_unrunnable(1)
    ui.last_done -= 40
    ui("done", "a · 1: pass in 40 s")
    ui("unrunnable", "b · 1: skip (needs 2 CUDA GPUs; this machine has 0)")  # no round of ~0 s
    ui("done", "a · 2: pass in 40 s")
    lines = buf.getvalue().splitlines()
    assert lines[1] == "  [point 2 of 3] b · 1: skip (needs 2 CUDA GPUs; this machine has 0) · about 40 s left", lines
    assert ui.rounds[0] >= 40 and len(ui.rounds) == 2


def _beats(buf: io.StringIO) -> list[str]:
    return [ln for ln in buf.getvalue().splitlines() if ln.startswith("  … still ")]


def test_piped_a_heartbeat_line_comes_while_nothing_else_is_printed():
    console, buf = _piped()
    clock = ManualClock()
    ui = ProgressUI(heartbeat=2, console=console, clock=clock)
    with ui.running():
        clock.sleepers(1)
        ui("run", "toy · 1.0.0: compiling DeepSpeed's shm_comm op (first run of this venv; later runs load it)")
        clock.advance(1.9)
        assert _beats(buf) == []  # not yet 2 s of quiet
        clock.advance(0.1)
        assert len(_beats(buf)) == 1
        clock.advance(5)  # one more at 4 s and at 6 s, each 2 s after the last line printed
        assert len(_beats(buf)) == 3
        ui("done", "toy · 1.0.0: pass in 7.0 s")
        clock.advance(10)  # nothing under way: no heartbeat
    lines = buf.getvalue().splitlines()
    assert [re.sub(r".*  (\S+)  \((\S+) in all\)$", r"\1 \2", ln) for ln in _beats(buf)] == \
        ["0:02 0:02", "0:04 0:04", "0:06 0:06"], lines
    assert all("compiling DeepSpeed's shm_comm op (first run of this venv; later runs load it)" in ln
               for ln in _beats(buf))
    assert lines[-1] == "  toy · 1.0.0: pass in 7.0 s"


def test_piped_the_heartbeat_is_quiet_while_other_lines_come():
    console, buf = _piped()
    clock = ManualClock()
    ui = ProgressUI(heartbeat=4, console=console, clock=clock)
    with ui.running():
        clock.sleepers(1)
        ui("run", "toy · 1.0.0: running")
        for _ in range(6):
            clock.advance(3)
            ui("note", "something else")
        assert "still" not in buf.getvalue()
        clock.advance(4)  # and once the other lines stop, it comes
    assert len(_beats(buf)) == 1


def test_no_heartbeat_when_it_is_off():
    console, buf = _piped()
    clock = ManualClock()
    ui = ProgressUI(heartbeat=0, console=console, clock=clock)
    with ui.running():
        ui("run", "toy · 1.0.0: running")
        clock.advance(100)
    assert "still" not in buf.getvalue()


def test_on_a_terminal_the_clock_ticks_with_no_new_event():
    from conftest import wait_until

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160, markup=False, highlight=False)
    clock = ManualClock()
    ui = ProgressUI(console=console, clock=clock)
    with ui.running():
        ui("run", "toy · 1.0.0: compiling DeepSpeed's shm_comm op")
        ui("ahead", "look-ahead for toy · 1.1.0 (the next point): building env 1a2b (dsb-toy==1.1.0)")
        wait_until(lambda: "compiling DeepSpeed's shm_comm op  0:00" in buf.getvalue(), 60, "the first frame")
        clock.advance(1)  # no event: Live's own refresh shows the clock moved
        wait_until(lambda: "compiling DeepSpeed's shm_comm op  0:01" in buf.getvalue(), 60, "a frame at 0:01")
    out = buf.getvalue()
    assert "(0:01 in all)" in out
    assert "look-ahead for toy · 1.1.0 (the next point): building env 1a2b (dsb-toy==1.1.0)  0:01" in out


def test_a_matrix_says_the_time_left_once_a_point_has_run():
    console, buf = _piped()
    clock = ManualClock()
    ui = ProgressUI(total=4, heartbeat=0, console=console, clock=clock)
    with ui.running():
        ui("reused", "toy · 1.0.0: pass (run 1, recorded)")  # recorded: no pace from it
        clock.advance(5)
        ui("done", "toy · 1.1.0: pass in 5 s")
        clock.advance(7)
        ui("done", "toy · 1.2.0: pass in 7 s")
    lines = buf.getvalue().splitlines()
    assert lines[0] == "  [point 1 of 4] toy · 1.0.0: pass (run 1, recorded)"
    assert lines[1] == "  [point 2 of 4] toy · 1.1.0: pass in 5 s · about 10 s left"
    assert lines[2] == "  [point 3 of 4] toy · 1.2.0: pass in 7 s · about 10 s left", lines  # median 6 s


@pytest.mark.parametrize("raw, value", [("", 30.0), ("5", 5.0), ("0", 0.0), (" 12.5 ", 12.5)])
def test_the_heartbeat_is_set_by_dsbisect_heartbeat(raw, value):
    assert heartbeat_seconds({"DSBISECT_HEARTBEAT": raw}) == value
    assert heartbeat_seconds({}) == 30.0


@pytest.mark.parametrize("raw", ["abc", "-1", "nan", "inf", "1e9"])
def test_a_bad_heartbeat_is_bad_input(raw):
    with pytest.raises(InputError, match=r"DSBISECT_HEARTBEAT=.*: give the seconds between heartbeat lines"):
        heartbeat_seconds({"DSBISECT_HEARTBEAT": raw})


def test_a_bad_heartbeat_is_one_line_exit_2_and_creates_nothing(tmp_path, cli, monkeypatch):
    write_matrix(tmp_path, ["1.0.0"])
    house = tmp_path / "house"
    house.mkdir()
    (house / "dsb_toy-1.0.0-py3-none-any.whl").write_bytes(b"")  # listed is all the check needs
    monkeypatch.setenv("DSBISECT_HEARTBEAT", "soon")
    res = cli("run", "matrix.yaml", *offline(house, tmp_path / "cache"), cwd=tmp_path)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and "DSBISECT_HEARTBEAT=soon" in lines[0], res.output
    assert not (tmp_path / ".dsbisect").exists() and not (tmp_path / "cache").exists()


# --------------------------------------------------------------- for real (slow)


@pytest.mark.slow
def test_a_piped_bisection_says_its_range_look_ahead_pace_and_one_time_per_run(tmp_path_factory, tmp_path, cli,
                                                                              cache_dir, monkeypatch):
    house = toypkg.build_wheelhouse(tmp_path_factory.mktemp("progress-house"),
                                    {"3.0.0": "ok", "3.1.0": "slowraise", "3.2.0": "slowraise"},
                                    dist="dsb-progress")
    write_matrix(tmp_path, ["3.0.0"], package="dsb-progress", nproc=1)
    # Each bad point lasts over 5 s and the heartbeat is 1 s: at least one heartbeat on any machine
    # (with 2 s and points of 2.1 s, a loaded CI machine printed none).
    monkeypatch.setenv("DSBISECT_HEARTBEAT", "1")
    res = cli("bisect", "dsb-progress", "3.0.0", "3.2.0", "--case", "toy", "--jobs", "1",
              *offline(house, cache_dir), cwd=tmp_path)
    assert res.exit_code == 0, res.output
    err = res.stderr
    assert ("3 releases from 3.0.0 to 3.2.0 (1 between them: about 1 step after the ends); both ends first: "
            "3.0.0 (good) and 3.2.0 (bad)") in err
    assert err.index("both ends first") < err.index("running (run 1")
    assert re.search(r"left \(about \d steps?, about \d+ (s|min) at the pace so far\); testing 3\.1\.0", err), err
    assert re.search(r"look-ahead for toy · dsb-progress 3\.\d\.0 \([^)]*built while another point runs\): "
                     r"building env \w+ \(dsb-progress==3\.\d\.0\)", err), err
    assert "  … still toy · dsb-progress 3." in err  # a heartbeat while a point ran
    report = json.loads(cli("report", "--format", "json", cwd=tmp_path).stdout)
    grid = cli("report", cwd=tmp_path).stdout
    for run in report["runs"]:
        shown = eta.seconds_text(run["seconds"])
        assert f"{run['point']}: {run['outcome']} in {shown}" in err
        assert f"{run['outcome'].upper()} {shown} #{run['id']}" in grid


def test_no_heartbeat_under_a_question_to_the_user():
    console, buf = _piped()
    clock = ManualClock()
    ui = ProgressUI(heartbeat=2, console=console, clock=clock)
    with ui.running():
        clock.sleepers(1)
        ui("run", "toy · 1.0.0: preparing venv")
        with ui.paused():  # bisect --manual asks "good, bad or skip"
            clock.advance(10)
        assert "still" not in buf.getvalue()
        clock.advance(1.9)
        assert "still" not in buf.getvalue()  # the quiet counts from the answer
        clock.advance(0.1)
    assert "  … still toy · 1.0.0: preparing venv" in buf.getvalue()
