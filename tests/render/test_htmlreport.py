"""The HTML report (issue 25): the rank × collective view, the ladder, the page, in a real browser.

Fast: the views of real flight-recorder dumps (the 2×H200 NCCL hang kept in tests/data) and of
synthetic sets of 8, 64 and 512 ranks written as torch writes them (``frsets``), read by the
real readers; hostile text; bad input.  Slow: real runs (the toy deadlock, a rank computing
while the other waits, a bisection with skips and a yanked release) and Debian's ``chromium``
loading each page (``browser``): no console message, no network request, and the words in the
DOM.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

import browser
import frsets
from conftest import write_matrix

from dsbisect.render import htmlsource
from dsbisect.render import rankview
from dsbisect.render.htmlreport import Page, RunPage, render, run_section
from dsbisect.render.ladder import Ladder, Rung, svg
from dsbisect.render.ladder import Tested as Probe
from dsbisect.render.rankview import Coll, Look, RankLook, State, build

DATA = Path(__file__).parents[1] / "data"
needs_browser = pytest.mark.skipif(browser.CHROMIUM is None, reason=browser.SKIP_REASON)
TOKEN = "hf_" + "Q7xK2mPz9LwR4tYv8NbC3dFgH6jS1aE5uW"  # the shape of a Hugging Face token
HOSTILE = f"</script><script>alert(1)</script><img src=x onerror=alert(2)> {TOKEN} \x1b[31mred"


def _page(run: RunPage, ladders=()) -> str:
    return render(Page(title="test", ladders=tuple(ladders), runs=(run,)))


def _run_page(looks, outcome="hang", **kw) -> RunPage:
    return RunPage(**({"id": 7, "title": "toy · 1.3.0", "outcome": outcome, "manual": False, "reason": "",
                       "signature": "", "seconds": 1.0, "looks": tuple(looks), "early": False, "proof": "",
                       "note": "", "log_tail": ""} | kw))


def _loaded(html: str, tmp_path: Path, name: str = "page.html") -> browser.Loaded:
    page = tmp_path / name
    page.write_text(html)
    seen = browser.load(page, tmp_path / f"chromium-{name}")
    assert seen.console == (), seen.console
    assert seen.requests == (), seen.requests
    return seen


# ------------------------------------------------------------------ rank view, fast


def test_the_real_nccl_hang_names_the_size_mismatch_and_both_waits():
    """tests/data/nccl-hang-gpu: run 2 of the committed seed-2 store (2×H200), its folder as kept."""
    (look,), early, _ = htmlsource.folder_looks(DATA / "nccl-hang-gpu")
    view = build(look)
    assert not early and view.mismatch is not None and (view.mismatch.seq, view.mismatch.kind) == (121, "size")
    assert view.words[0] == ("at #121 the ranks disagree (sizes): rank 0 waits in _ALLGATHER_BASE #121 with 2048 "
                             "elements at partition_parameters.py:1315; rank 1 passed _ALLGATHER_BASE #121 with 32 "
                             "elements and waits in _ALLGATHER_BASE #122 (2048 elements)")
    html = run_section(_run_page([look]))
    assert re.search(r'<th class="col mismatch" data-seq="121">#121</th>', html)
    assert html.count('class="c pending head mismatch"') == 1  # rank 0's wait, in the red column


@pytest.mark.parametrize("world", [8, 64, 512])
def test_ranks_that_behave_alike_are_one_row(tmp_path, world):
    folder = frsets.split_hang(tmp_path / "run", world=world)
    (look,), _, _ = htmlsource.folder_looks(folder)
    assert len(look.ranks) == world
    t0 = time.perf_counter()
    view = build(look)
    html = _page(_run_page([look]))
    took = time.perf_counter() - t0
    half = world // 2
    assert [r.label for r in view.rows] == [f"ranks 0–{half - 1}", f"ranks {half}–{world - 1}"]
    assert view.words == (f"ranks {half}–{world - 1} never entered _ALLGATHER_BASE #120; they wait in "
                          f"_ALLGATHER_BASE #119 (2048 elements) at engine.py:1234",
                          f"ranks 0–{half - 1} wait in _ALLGATHER_BASE #120 (2048 elements), ranks {half}–{world - 1} "
                          f"in _ALLGATHER_BASE #119 (2048 elements)")
    assert len(html.encode()) < 2 << 20, len(html)  # the time is benchmarks/html_report.py's figure, not asserted
    print(f"{world} ranks: view + page {took * 1000:.0f} ms, {len(html.encode())} bytes")


def test_ranks_that_all_differ_are_capped_and_counted():
    ranks = tuple(RankLook(rank=r, colls=(Coll("default_pg", r, "ALLREDUCE", 4, 4, State.PENDING),)) for r in range(512))
    view = build(Look("each its own", ranks))
    assert len(view.rows) == rankview.MAX_ROWS and view.hidden == 512 - rankview.MAX_ROWS
    assert len(_page(_run_page([Look("each its own", ranks)])).encode()) < 2 << 20


def test_a_rank_that_never_entered_is_named_with_where_it_waits():
    ahead = RankLook(0, (Coll("default_pg", 5, "ALLREDUCE", 4, 4, State.COMPLETED),
                         Coll("default_pg", 6, "ALLREDUCE", 8, 8, State.PENDING)), where="all_reduce at train.py:40")
    behind = RankLook(1, (Coll("default_pg", 5, "ALLREDUCE", 4, 4, State.COMPLETED),), where="barrier at engine.py:1234")
    view = build(Look("one look", (ahead, behind)))
    assert view.words[0] == "rank 1 never entered ALLREDUCE #6; it waits in barrier at engine.py:1234"
    assert view.mismatch.kind == "missing" and view.mismatch.seq == 6
    assert build(Look("one look", (ahead, behind)), highlight=False).mismatch is None


def test_ranks_that_agree_show_no_mismatch():
    same = tuple(RankLook(r, (Coll("default_pg", 3, "BROADCAST", 9, 9, State.COMPLETED),
                              Coll("default_pg", 4, "ALLREDUCE", 4, 4, State.STARTED))) for r in range(4))
    view = build(Look("all alike", same))
    assert view.mismatch is None and view.words == ("ranks 0–3 wait in ALLREDUCE #4 (4 elements)",)
    assert "mismatch" not in run_section(_run_page([Look("all alike", same)])).replace("mismatch-words", "")


def test_ranks_label():
    assert rankview.ranks_label([3]) == "rank 3"
    assert rankview.ranks_label([0, 1, 2, 5, 7, 8]) == "ranks 0–2, 5, 7–8"


# ------------------------------------------------------------------ inert text, fast


def _hostile_page() -> str:
    rank = RankLook(0, (Coll(HOSTILE, 1, HOSTILE, 4, 4, State.PENDING),), where=HOSTILE, stack=(HOSTILE, HOSTILE))
    lad = Ladder(title=HOSTILE, stage="release", boundary=(HOSTILE, "2.0"), caveats=(HOSTILE,), verdict="found",
                 note=HOSTILE, rungs=(Rung(HOSTILE, Probe(1, "pass", "good", (7,), False, HOSTILE), subject=HOSTILE),
                                      Rung("2.0", Probe(2, "fail", "bad", (8,), False, HOSTILE))))
    run = _run_page([Look(HOSTILE, (rank,))], reason=HOSTILE, signature=HOSTILE, proof=HOSTILE, note=HOSTILE,
                    log_tail=HOSTILE, title=HOSTILE)
    return render(Page(title=HOSTILE, ladders=((HOSTILE, (lad,), HOSTILE),), runs=(run,), note=HOSTILE))


def test_text_from_a_run_is_inert_and_its_secrets_masked():
    html = _hostile_page()
    assert TOKEN not in html and "hf_Q7x" not in html
    assert "<img" not in html and "<script" not in html and "</script>" not in html and "\x1b" not in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html


# ------------------------------------------------------------------ ladder, fast


def test_the_ladder_draws_every_candidate_the_boundary_and_the_caveat():
    t = lambda order, outcome, verdict, run: Probe(order, outcome, verdict, (run,), False, "")  # noqa: E731
    lad = Ladder(title="dsb 1 → 5", stage="release", verdict="found", note="",
                 boundary=("1.3.0", "1.5.0"), caveats=("1.4.0 (yanked) lies between 1.3.0 and 1.5.0 and was not tested",),
                 rungs=(Rung("1.0.0", t(1, "pass", "good", 1)), Rung("1.1.0"), Rung("1.2.0", t(3, "skip", "skip", 3)),
                        Rung("1.3.0", t(4, "pass", "good", 4)), Rung("1.5.0", t(2, "hang", "bad", 2))))
    out = svg(lad)
    assert out.count('class="rung tested"') == 4 and out.count('class="rung untested"') == 1
    assert [m for m in re.findall(r'href="#run-(\d+)"', out)] == ["1", "3", "4", "2"]
    assert 'class="point skip"' in out and 'class="point hang"' in out and "1.4.0 (yanked)" in out
    assert 'class="boundary"' in out


# ------------------------------------------------------------------ CLI, fast


@pytest.mark.parametrize("args, said", [
    (["run", "--format", "html", "matrix.yaml"], "--format html is for dsbisect report and dsbisect show"),
    (["bisect", "dsb-toy", "1.0.0", "1.3.0", "--format", "html"], "--format html is for dsbisect report"),
    (["show", "1", "--format", "json"], "--format json: show prints a table, or an HTML page"),
    (["show", "1", "-o", "x.html"], "-o needs --format html"),
])
def test_html_where_it_is_not_written_is_bad_input(tmp_path, cli, args, said):
    res = cli(*args, cwd=tmp_path)
    assert res.exit_code == 2 and said in res.stderr, res.output
    assert not (tmp_path / "x.html").exists() and not (tmp_path / ".dsbisect").exists()


# ------------------------------------------------------------------ real runs and the browser, slow


@pytest.mark.slow
@needs_browser
def test_hostile_text_stays_text_in_the_browser(tmp_path):
    seen = _loaded(_hostile_page(), tmp_path)
    assert "img" not in seen.tags and "script" not in seen.tags
    assert "<img src=x onerror=alert(2)>" in seen.text and TOKEN not in seen.dom


@pytest.mark.slow
@needs_browser
def test_the_browser_check_sees_a_request_and_a_console_error(tmp_path):
    """The checks can fail: a page that fetches and logs is caught."""
    page = tmp_path / "bad.html"
    page.write_text('<!doctype html><img src="http://example.invalid/a.png"><script>console.error("boom")</script>')
    seen = browser.load(page, tmp_path / "c")
    assert seen.requests == ("http://example.invalid/a.png",) and any("boom" in c for c in seen.console)


@pytest.mark.slow
@needs_browser
def test_512_ranks_in_the_browser(tmp_path):
    (look,), _, _ = htmlsource.folder_looks(frsets.split_hang(tmp_path / "run", world=512))
    seen = _loaded(_page(_run_page([look])), tmp_path)
    assert "ranks 256–511 never entered _ALLGATHER_BASE #120; they wait in _ALLGATHER_BASE #119" in seen.text


@pytest.mark.slow
@needs_browser
def test_the_toy_deadlock_as_a_page_and_as_a_table(tmp_path, cli, toy_deadlock):
    run = toy_deadlock.run  # the session's run (read only: the pages are written here, in tmp_path)
    assert run["outcome"] == "hang"
    store = str(toy_deadlock.store)
    shown = cli("show", str(run["id"]), "--store", store, cwd=tmp_path)
    assert shown.exit_code == 0, shown.output
    assert re.search(r"rank 1 waits in BARRIER #(\d+) at toy_repro\.py:\d+", shown.stdout), shown.stdout
    assert re.search(r"rank 1 +│ BARRIER pending", shown.stdout) and "nothing moved" in shown.stdout, shown.stdout
    res = cli("show", str(run["id"]), "--store", store, "--format", "html", "-o", "run.html", cwd=tmp_path)
    assert res.exit_code == 0 and res.stdout == "", res.output
    seen = _loaded((tmp_path / "run.html").read_text(), tmp_path)
    seq = re.search(r"BARRIER #(\d+)", run["reason"]).group(1)
    assert f"at #{seq} the ranks disagree (ops): rank 0 waits in ALLREDUCE #{seq} with 4 elements" in seen.text
    assert re.search(rf"rank 1 waits in BARRIER #{seq} at toy_repro\.py:\d+", seen.text), seen.text
    assert seen.dom.count('class="rankview"') == 2 and "look 1: request" in seen.text and "look 2: request" in seen.text
    # the store's report: the Markdown links the page it wrote beside
    res = cli("report", "--store", store, "--format", "markdown", "-o", "report.md", "--html", "report.html", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    assert "[report.html](report.html)" in (tmp_path / "report.md").read_text()
    assert f'id="run-{run["id"]}"' in (tmp_path / "report.html").read_text()


@pytest.mark.slow
def test_a_rank_computing_while_the_other_waits_is_not_highlighted(compute_launch):
    """The slow-but-progressing battery's "compute" scenario (tests/forensics/test_early_hang.py), run for
    real (once a session: conftest's compute_launch): the early verdict looked and proved nothing;
    the page marks nothing (a look kept from such a run, were one kept, is drawn without a
    mismatch: only a hang's looks name one)."""
    res, run = compute_launch
    assert not res.timed_out and res.exit_code == 0, res
    # the rounds looked while rank 0 waited in the all_reduce that rank 1 had not reached
    assert "rank 0: ALLREDUCE" in run.fr_rounds.read_text() and "outside any collective" in run.fr_rounds.read_text()
    looks, early, proof = htmlsource.folder_looks(run.path)
    assert not early and not proof
    html = run_section(_run_page(looks, outcome="pass"))
    assert "mismatch" not in html.replace("mismatch-words", "") and "never entered" not in html
    assert all(build(look, highlight=False).mismatch is None for look in looks)


@pytest.mark.slow
@needs_browser
def test_a_bisection_with_skips_and_a_yanked_release_as_a_ladder(tmp_path, cli, cache_dir, simple_index):
    import toypkg

    releases = {"9.0.0": "ok", "9.1.0": "import", "9.2.0": "import", "9.3.0": "ok", "9.4.0": "raise", "9.5.0": "raise"}
    for version, behaviour in releases.items():
        simple_index.add(toypkg.build_wheel(tmp_path / "w", version, behaviour, dist="dsb-ladder"),
                         yanked="broken upload" if version == "9.4.0" else "")
    write_matrix(tmp_path, ["9.0.0"], package="dsb-ladder", collective_timeout=5, nproc=1)
    res = cli("bisect", "dsb-ladder", "9.0.0", "9.5.0", "--case", "toy", "--regress-on", "fail", "--index-url",
              simple_index.url, "--cache-dir", str(cache_dir), "-q", "--format", "json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["last_good"], out["first_bad"]) == ("9.3.0", "9.5.0") and out["caveats"], out
    tested = [s["version"] for s in out["steps"]]
    assert any(s["outcome"] == "skip" for s in out["steps"]), out["steps"]
    res = cli("report", "--bisection", "", "--store", str(tmp_path / ".dsbisect"), "--format", "html", "-o", "b.html",
              cwd=tmp_path)
    assert res.exit_code == 0, res.output
    seen = _loaded((tmp_path / "b.html").read_text(), tmp_path)
    ladder = seen.dom[seen.dom.index('<svg class="ladder"'):seen.dom.index("</svg>")]
    assert re.findall(r'class="rung tested" href="#run-\d+" data-label="([\d.]+)"', ladder) == \
        [v for v in out["candidates"] if v in tested]
    assert re.findall(r'<text class="order"[^>]*>(\d+)</text>', ladder) == \
        [str(tested.index(v) + 1) for v in out["candidates"] if v in tested]
    assert "9.4.0 (yanked)" in ladder and 'class="point skip"' in ladder and 'class="boundary"' in ladder
    for run_id in re.findall(r'href="#run-(\d+)"', seen.dom):
        assert f'id="run-{run_id}"' in seen.dom
    assert all(f'data-label="{v}"' in seen.dom for v in tested)


# ------------------------------------------------------------------ odd records, fast

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

JSONS = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=6),
                     lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
                     max_leaves=6)
STEP = {"stage": "release", "version": "1.0.0", "commit": None, "subject": "", "verdict": "good", "outcome": "pass",
        "run_ids": [1], "detail": ""}
RESULT = {"candidates": ["1.0.0", "1.1.0"], "steps": [STEP, STEP | {"version": "1.1.0", "verdict": "bad", "stage": "commit",
          "commit": "abc"}], "last_good": "1.0.0", "first_bad": "1.1.0", "caveats": ["x"], "mode": "regression",
          "commit": {"last_good": "a", "first_bad": "b", "commits_in_range": 3}, "verdict": "found",
          "env_diff": {"trials": [{"applied": [0], "label": "t", "outcome": "fail", "run_ids": [2]}], "culprits": ["a"]},
          "releases": [{"steps": [STEP]}]}


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from([*RESULT, "steps.0", "steps.0.run_ids", "env_diff.trials", "env_diff.culprits",
                            "commit.first_bad", "releases.0"]), value=JSONS, package=st.sampled_from(["dsb", "environment"]))
def test_no_value_in_a_stored_bisection_breaks_the_page(key, value, package):
    from dsbisect.records.bisections import AskedFor, BisectionRecord, BisectionStatus

    result = json.loads(json.dumps(RESULT))
    inner, *path = key.split(".")
    if not path:
        result[inner] = value
    else:
        holder = result[inner]
        for k in path[:-1]:
            holder = holder[int(k)] if isinstance(holder, list) else holder[k]
        holder[int(path[-1]) if isinstance(holder, list) else path[-1]] = value
    record = BisectionRecord(1, "k", package, "1.0.0", "1.1.0", AskedFor.from_json({}), BisectionStatus.DONE, result,
                             0.0, 0.0)
    render(Page(title="t", ladders=(("h", htmlsource.ladders(record), htmlsource._summary(record)),), runs=()))


# ------------------------------------------------------------------ recorded results, fast


def _seed2_store(tmp_path: Path) -> Path:
    """The committed seed-2 store (2×H200), with run 2's folder put back where the store keeps
    run folders (tests/data/nccl-hang-gpu is that folder: the pids of the record's evidence)."""
    import shutil

    store = tmp_path / "seed2"
    (store / "runs").mkdir(parents=True)
    shutil.copy(Path(__file__).parents[2] / "docs/results/stores/2026-11-30-h200x2-seed2.sqlite3",
                store / "dsbisect.sqlite3")
    shutil.copytree(DATA / "nccl-hang-gpu", store / "runs" / "000002")
    return store


def test_the_committed_seed2_store_as_a_page(tmp_path):
    from dsbisect.store.store import Store

    store = Store(_seed2_store(tmp_path), readonly=True)
    page = htmlsource.store_page(store, store.runs())
    (release,), (fix_release, fix_commits) = (ls for _, ls, _ in page.ladders)
    assert release.boundary == ("4.36.2", "4.37.0") and fix_commits.boundary == ("78b7693591", "f8551b439e")
    labels = [r.label for r in fix_commits.rungs]
    assert labels.index("f8551b439e") == labels.index("78b7693591") + 1
    html = render(page)
    assert html.count('class="boundary"') == 3
    run2 = next(r for r in page.runs if r.id == 2)
    assert run2.looks and "at #121 the ranks disagree (sizes)" in html
    run3 = next(r for r in page.runs if r.id == 3)  # no folder kept: its record's signature, said so
    assert not run3.looks and "folder is not here" in run3.note and "at SeqNum 119" in run3.signature
    store.close()


def test_an_environment_bisection_as_ladders():
    """The recorded CPU env-diff bisection (docs/results): trials, then the culprit's releases and commits."""
    from dsbisect.records.bisections import AskedFor, BisectionRecord, BisectionStatus

    d = json.loads((Path(__file__).parents[2] / "docs/results/2026-12-02-cpu-envdiff-accelerate.json").read_text())
    trials, releases, commits = htmlsource.ladders(BisectionRecord(1, "k", "environment", d["good_env"], d["bad_env"],
                                                                  AskedFor.from_json({}), BisectionStatus.DONE, d,
                                                                  0.0, 0.0))
    assert [r.label for r in trials.rungs[:2]] == ["good env", "bad env"] and len(trials.rungs) == 8
    assert releases.boundary == ("0.24.1", "0.25.0") and [r.tested is None for r in releases.rungs].count(True) == 1
    assert commits.boundary is None and "61 commits between the releases; 12 tested" in commits.note


@pytest.mark.slow
@needs_browser
def test_the_seed2_page_in_the_browser(tmp_path, cli):
    store = _seed2_store(tmp_path)
    res = cli("report", "--store", str(store), "--format", "html", "-o", "seed2.html", cwd=tmp_path)
    assert res.exit_code == 0 and res.stdout == "", res.output
    seen = _loaded((tmp_path / "seed2.html").read_text(), tmp_path)
    assert ("at #121 the ranks disagree (sizes): rank 0 waits in _ALLGATHER_BASE #121 with 2048 elements "
            "at partition_parameters.py:1315; rank 1 passed _ALLGATHER_BASE #121 with 32 elements") in seen.text
    assert "first fixed commit f8551b439ea4 Fix racing condition in GatheredParameters (#3819)" in seen.text
    for run_id in re.findall(r'href="#run-(\d+)"', seen.dom):
        assert f'id="run-{run_id}"' in seen.dom


def test_report_selects_one_bisection_by_its_key(tmp_path, cli):
    store = str(_seed2_store(tmp_path))
    res = cli("report", "--store", store, "--bisection", "384d", "--format", "html", "-o", "one.html", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    html = (tmp_path / "one.html").read_text()
    assert "transformers 4.36.2 → 4.39.2" in html and "deepspeed 0.9.5 → 0.10.0" not in html
    assert 'id="run-2"' in html and 'id="run-7"' not in html  # its runs only (#7 is a commit probe of the other)
    res = cli("report", "--store", store, "--bisection", "zz", "--format", "html", "-o", "two.html", cwd=tmp_path)
    assert res.exit_code == 2 and "--bisection zz: no bisection with a key starting so" in res.stderr, res.output
    assert not (tmp_path / "two.html").exists()


def test_the_terminal_table_groups_the_ranks_the_same_way(tmp_path):
    import io

    from rich.console import Console

    (look,), _, _ = htmlsource.folder_looks(frsets.split_hang(tmp_path / "run", world=64))
    console = Console(file=io.StringIO(), width=160, color_system=None)
    console.print(rankview.rank_text(build(look, max_columns=6)))
    text = console.file.getvalue()
    assert "ranks 32–63 never entered _ALLGATHER_BASE #120; they wait in _ALLGATHER_BASE #119" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("│ ranks")]
    assert [r.split("│")[1].strip() for r in rows] == ["ranks 0–31", "ranks 32–63"]
    assert "#120!" in text  # the mismatch column


def test_a_failed_run_carries_its_first_ranks_traceback_collapsed_and_masked():
    tb = ("rank 1 raised first (ranks/1/stderr.log)\nTraceback (most recent call last):\n"
          '  File "/venv/site-packages/deepspeed/comm/torch.py", line 209, in all_gather_into_tensor\n'
          "RuntimeError: <b>bad</b> size (HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123)")
    page = _page(_run_page((), outcome="fail", reason="RuntimeError: bad size", traceback=tb))
    assert '<details class="traceback"><summary>rank 1 raised first (ranks/1/stderr.log)</summary>' in page
    assert "line 209, in all_gather_into_tensor" in page and "&lt;b&gt;bad&lt;/b&gt;" in page
    assert "hf_abcdefghijklmnopqrstuvwxyz0123" not in page
