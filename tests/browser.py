"""A real headless browser for the HTML report's tests: Debian's ``chromium``.

``load(page)`` opens a file with ``chromium --headless --dump-dom`` and returns the DOM as the
browser built it, the page's console messages (``--enable-logging=stderr``: errors, CSP
refusals) and every network request the page made (``--log-net-log``: requests whose network
isolation key is the page's ``file://`` site; the browser's own background requests are keyed
otherwise).  Names are resolved to nothing (``--host-resolver-rules``), so a request that slips
through reaches no one, and is still seen.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SKIP_REASON = "no chromium on PATH (apt-get install -y chromium; .ci/run installs it)"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-extensions",
         "--no-pings", "--disable-domain-reliability", "--host-resolver-rules=MAP * ~NOTFOUND",
         "--enable-logging=stderr", "--v=0")
_CONSOLE = re.compile(r":(INFO|WARNING|ERROR):CONSOLE[^\]]*\]\s*(.*)")


@dataclass(frozen=True)
class Loaded:
    dom: str
    console: tuple[str, ...]  # every console line of the page
    requests: tuple[str, ...]  # URLs the page asked the network for
    text: str  # the DOM's text content
    tags: dict  # tag name -> count, in the DOM


def load(page: Path, work: Path) -> Loaded:
    work.mkdir(parents=True, exist_ok=True)
    net = work / "net.json"
    argv = [CHROMIUM, *FLAGS, f"--user-data-dir={work / 'profile'}", f"--log-net-log={net}", "--dump-dom",
            page.resolve().as_uri()]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    console = tuple(m.group(2) for line in done.stderr.splitlines() for m in [_CONSOLE.search(line)] if m)
    parser = _Text()
    parser.feed(done.stdout)
    return Loaded(dom=done.stdout, console=console, requests=_page_requests(net), text=" ".join(parser.text.split()),
                  tags=dict(parser.tags))


def screenshot(page: Path, png: Path, work: Path, width: int = 1280, height: int = 900) -> None:
    argv = [CHROMIUM, *FLAGS, f"--user-data-dir={work / 'profile-shot'}", "--hide-scrollbars",
            f"--window-size={width},{height}", f"--screenshot={png.resolve()}", page.resolve().as_uri()]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and png.is_file(), done.stderr[-3000:]


# Run in a copy of the page (its CSP allows no script): what sticks out of the viewport, and the
# SVG text that its own picture cuts off.  Elements inside a scrolling box (overflow-x auto) are
# that box's business: they scroll, the page does not.
_MEASURE = """<script>
addEventListener('load', () => {
  const vw = document.documentElement.clientWidth, out = [], cut = [];
  const scrolls = el => { for (let p = el.parentElement; p; p = p.parentElement) {
    const o = getComputedStyle(p).overflowX; if (o === 'auto' || o === 'scroll') return true; } return false; };
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width && r.right > vw + 1 && !scrolls(el)) out.push(el.tagName.toLowerCase() + '.' + el.className.baseVal
      + (typeof el.className === 'string' ? el.className : '') + ' right=' + Math.round(r.right));
  }
  for (const lad of document.querySelectorAll('svg.ladder')) {  // a ladder must be seen whole, not scrolled to
    const box = lad.closest('article') || document.body, r = lad.getBoundingClientRect();
    if (r.right > box.getBoundingClientRect().right + 1) out.push('svg.ladder (beyond its article) right=' + Math.round(r.right));
  }
  for (const t of document.querySelectorAll('svg text')) {
    const svg = t.ownerSVGElement.getBoundingClientRect(), r = t.getBoundingClientRect();
    if (r.left < svg.left - 1 || r.right > svg.right + 1 || r.top < svg.top - 1 || r.bottom > svg.bottom + 1)
      cut.push(t.textContent);
  }
  const pre = document.createElement('pre'); pre.id = 'dsbisect-measured';
  pre.textContent = JSON.stringify({viewport: vw, page: document.documentElement.scrollWidth, out, cut});
  document.body.appendChild(pre);
});
</script>"""


@dataclass(frozen=True)
class Measured:
    viewport: int  # the page's width in the browser window
    page: int  # the width of what it laid out (more than ``viewport``: the page scrolls sideways)
    out: tuple[str, ...]  # what sticks out of the viewport (not inside a scrolling box), and a ladder
    # wider than its article (seen only by scrolling)
    cut: tuple[str, ...]  # SVG text cut off by its own picture's edges


def measure(page: Path, work: Path, width: int) -> Measured:
    """``page`` laid out by the real browser in a window ``width`` pixels wide."""
    work.mkdir(parents=True, exist_ok=True)
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text())
    probe = work / f"measure-{width}.html"
    probe.write_text(html.replace("</body>", _MEASURE + "</body>"))
    argv = [CHROMIUM, *FLAGS, f"--user-data-dir={work / f'profile-{width}'}", "--hide-scrollbars",
            f"--window-size={width},900", "--dump-dom", probe.resolve().as_uri()]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    found = re.search(r'<pre id="dsbisect-measured">(.*?)</pre>', done.stdout, re.S)
    assert found, "the measuring script did not run: " + done.stderr[-2000:]
    import html as html_mod

    data = json.loads(html_mod.unescape(found.group(1)))
    return Measured(data["viewport"], data["page"], tuple(data["out"]), tuple(data["cut"]))


def _page_requests(net: Path) -> tuple[str, ...]:
    try:
        data = json.loads(net.read_text())
    except ValueError:  # chromium ends the log without its closing bracket when it is killed
        data = json.loads(net.read_text().rstrip().rstrip(",") + "]}")
    types = {v: k for k, v in data["constants"]["logEventTypes"].items()}
    urls = []
    for e in data.get("events", []):
        p = e.get("params") or {}
        if types.get(e.get("type")) == "URL_REQUEST_START_JOB" and "file://" in str(p.get("network_isolation_key")):
            if not str(p.get("url", "")).startswith("file:"):
                urls.append(str(p.get("url")))
    return tuple(urls)


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text = ""
        self.tags: dict[str, int] = {}
        self._skip = 0

    def handle_starttag(self, tag, attrs) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        if tag in ("style", "script", "title"):
            self._skip += 1

    def handle_endtag(self, tag) -> None:
        if tag in ("style", "script", "title"):
            self._skip -= 1

    def handle_data(self, data) -> None:
        if not self._skip:
            self.text += data + " "
