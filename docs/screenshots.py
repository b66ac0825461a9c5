"""Take the docs' pictures of the HTML report again, from the current code, in a real browser.

    .venv/bin/python docs/screenshots.py                   # both pages (the bisection runs: PyPI, minutes)
    .venv/bin/python docs/screenshots.py --env-store DIR   # reuse a store that holds that bisection

Two pages, each written by dsbisect's own command line and shot by headless Chromium (Debian's
``chromium``) at 1280 and 640 pixels wide into ``docs/images/``:

- ``seed2-hang-*.png``: ``dsbisect show 2 --format html`` of the committed seed-2 store
  (docs/results/stores, 2×H200), run 2's folder put back from tests/data/nccl-hang-gpu, as
  tests/render/test_htmlreport.py does: the rank view of a real NCCL deadlock.
- ``envdiff-bisection-*.png``: ``dsbisect report --bisection KEY --format html`` of the bundled
  environment bisection (repro_scripts/envdiff's two freezes, the zoo's
  ``accelerate_tied_load_state``, ``--hold torch``), run here into a store of its own unless
  ``--env-store`` names one: the trials, then the culprit's releases.

Before writing a picture the page is loaded in the same browser and checked: no console error,
no request, and the words that the picture is meant to show.  The HTML pages are kept beside the
pictures' work folder (``build/screenshots/``) for a look by hand.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
WORK = ROOT / "build" / "screenshots"
DSBISECT = [sys.executable, "-c", "from dsbisect.cli import main; main()"]
sys.path.insert(0, str(ROOT / "tests"))
import browser  # noqa: E402  (tests/browser.py: the headless Chromium the tests use)

# (width, height) of each shot: the page's top, where what it is about is drawn.
SIZES = {"seed2-hang": ((1280, 580), (640, 800)), "envdiff-bisection": ((1280, 800), (640, 900))}
MUST_SAY = {"seed2-hang": ("_ALLGATHER_BASE", "#121"), "envdiff-bisection": ("accelerate", "0.25.0")}

ENV_BISECT = ["bisect", "--good-env", "repro_scripts/envdiff/good-2023-09.txt",
              "--bad-env", "repro_scripts/envdiff/bad-2023-12.txt", "--hold", "torch",
              "--matrix", "repro_scripts/zoo/matrix.yaml", "--case", "accelerate_tied_load_state"]


def dsbisect(*args: str) -> str:
    """Run dsbisect from the repository's root; its stdout (stderr passes through: progress)."""
    done = subprocess.run([*DSBISECT, *args], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"dsbisect {' '.join(args)}: exit {done.returncode}")
    return done.stdout


def hang_page() -> Path:
    store = WORK / "seed2-store"
    shutil.rmtree(store, ignore_errors=True)
    (store / "runs").mkdir(parents=True)
    shutil.copy(ROOT / "docs/results/stores/2026-11-30-h200x2-seed2.sqlite3", store / "dsbisect.sqlite3")
    shutil.copytree(ROOT / "tests/data/nccl-hang-gpu", store / "runs" / "000002")
    page = WORK / "seed2-hang.html"
    dsbisect("show", "2", "--store", str(store), "--format", "html", "-o", str(page))
    return page


def env_page(env_store: Path | None) -> Path:
    store = env_store or WORK / "envdiff-store"
    if env_store is None:
        dsbisect(*ENV_BISECT, "--store", str(store))
    key = next(line.split()[1].rstrip(":") for line in dsbisect("report", "--store", str(store)).splitlines()
               if line.startswith("bisection ") and "environment" in line)
    page = WORK / "envdiff-bisection.html"
    dsbisect("report", "--store", str(store), "--bisection", key, "--format", "html", "-o", str(page))
    return page


def shoot(name: str, page: Path) -> list[Path]:
    seen = browser.load(page, WORK / f"{name}-load")
    errors = [c for c in seen.console if "error" in c.lower() or "refused" in c.lower()]
    missing = [w for w in MUST_SAY[name] if w not in seen.text]
    if errors or seen.requests or missing:
        raise SystemExit(f"{page.name}: console {errors}, requests {list(seen.requests)}, missing {missing}")
    out = []
    for width, height in SIZES[name]:
        png = IMAGES / f"{name}-{width}.png"
        browser.screenshot(page, png, WORK / f"{name}-{width}", width=width, height=height)
        out.append(png)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-store", type=Path, help="a store that holds the bundled environment bisection")
    args = parser.parse_args()
    if browser.CHROMIUM is None:
        raise SystemExit(browser.SKIP_REASON)
    WORK.mkdir(parents=True, exist_ok=True)
    IMAGES.mkdir(parents=True, exist_ok=True)
    for png in shoot("seed2-hang", hang_page()) + shoot("envdiff-bisection", env_page(args.env_store)):
        print(png.relative_to(ROOT))


if __name__ == "__main__":
    main()
