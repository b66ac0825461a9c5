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
