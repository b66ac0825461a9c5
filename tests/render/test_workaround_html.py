"""``dsbisect workaround --format html``: the report as a page of the HTML report's kind (its CSS,
its CSP), in the real browser: no console message, no request, the words in the DOM, hostile
text kept text and a token masked, nothing out of a 640 px window.  The page of a real
invocation: tests/envdiff/test_workaround.py."""

from __future__ import annotations

import pytest

import browser

from dsbisect.core.model import Outcome
from dsbisect.envdiff.knobs import parse_knob
from dsbisect.envdiff.workaround import KnobTrial, Workarounds
from dsbisect.render.workaround import html, lines, markdown

needs_browser = pytest.mark.skipif(browser.CHROMIUM is None, reason=browser.SKIP_REASON)
TOKEN = "hf_" + "Q7xK2mPz9LwR4tYv8NbC3dFgH6jS1aE5uW"  # the shape of a Hugging Face token
HOSTILE = f"</td><script>alert(1)</script><img src=x onerror=alert(2)>{TOKEN}"


def _report() -> Workarounds:
    a, b, c = (parse_knob(t) for t in ("env:TOY_A=1", "config:zero_optimization.overlap_comm=false",
                                        f"env:TOY_HOSTILE={HOSTILE}"))
    fail, ok = Outcome.FAIL, Outcome.PASS
    alone = (KnobTrial((a,), (None,), (fail, fail), (2, 3), False),
             KnobTrial((b,), ("true",), (fail, fail), (4, 5), False),
             KnobTrial((c,), (None,), (fail, fail), (6, 7), False))
    groups = (KnobTrial((a, b), (None, "true"), (ok, ok), (8, 9), True),
              KnobTrial((a, c), (None, None), (fail,), (10,), False))
    return Workarounds(("python", "train.py", "--deepspeed", "ds.json"), Outcome.FAIL, (1,), alone,
                       ("env NCCL_ALGO=Ring: for nccl runs",), "found", groups,
                       ("1 group(s) of 2 not tried: --max-group-runs 3 spent (3 runs)",), 2)


def test_every_format_shows_the_pair_and_masks_the_token():
    w = _report()
    page, md, text = html(w), markdown(w), "\n".join(lines(w))
    for shown in (page, md, text):
        assert TOKEN not in shown and "TOY_A=1" in shown and "not a fix" in shown
        assert "max-group-runs 3 spent" in shown
    assert "<script>alert" not in page and "&lt;script&gt;" in page
    assert page.count("pill pass\">WORKS") == 2  # the pair, in the workarounds and among the groups
    assert "1 workaround(s) of 3 knobs and 2 groups tried" in text


@pytest.mark.slow
@needs_browser
@pytest.mark.parametrize("width", [640, 1280])
def test_the_workaround_page_in_the_browser(tmp_path, width):
    page = tmp_path / "workaround.html"
    page.write_text(html(_report()))
    seen = browser.load(page, tmp_path / "chromium")
    assert seen.console == () and seen.requests == (), (seen.console, seen.requests)
    assert "script" not in seen.tags and "img" not in seen.tags and TOKEN not in seen.dom
    assert "Workarounds (not fixes)" in seen.text and "Knobs together (groups of at most 2)" in seen.text
    assert "env TOY_A=1 config zero_optimization.overlap_comm=false unset, true #8 PASS #9 PASS" in seen.text
    measured = browser.measure(page, tmp_path / "m", width)
    assert measured.viewport == width and measured.page <= width and measured.out == (), measured

