"""Package indexes served over http from a folder, for tests (no network needed): PEP 503 HTML
(``SimpleIndex``) and PEP 691 JSON with PEP 700 upload times (``DatedIndex``)."""

from __future__ import annotations

import shutil
from pathlib import Path


class SimpleIndex:
    """A PEP 503 package index served over http from a folder, for tests (no network needed).

    ``add(wheel, yanked="")`` publishes a file; each project page lists its files, with
    ``data-yanked`` where given.  ``url`` is the ``.../simple/`` base URL.
    """

    def __init__(self, root: Path):
        import functools
        import http.server
        import threading

        self.root = root
        (root / "files").mkdir(parents=True, exist_ok=True)
        self.files: dict[str, list[tuple[str, str]]] = {}
        handler = functools.partial(_QuietHandler, directory=str(root))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"

    def add(self, path: Path, yanked: str = "") -> None:
        from packaging.utils import canonicalize_name, parse_wheel_filename

        name = canonicalize_name(parse_wheel_filename(path.name)[0])
        shutil.copy(path, self.root / "files" / path.name)
        self.files.setdefault(name, []).append((path.name, yanked))
        page = self.root / "simple" / name
        page.mkdir(parents=True, exist_ok=True)
        links = "".join(
            f'<a href="../../files/{f}"{f" data-yanked={chr(34)}{y}{chr(34)}" if y else ""}>{f}</a>\n'
            for f, y in self.files[name])
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
        (self.root / "simple" / "index.html").write_text(
            "<html><body>" + "".join(f'<a href="{n}/">{n}</a>' for n in self.files) + "</body></html>")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class DatedIndex:
    """A PEP 691 (JSON) package index whose files carry PEP 700 ``upload-time``s, served over http
    from a folder: what ``uv pip compile --exclude-newer`` needs to resolve "as on a date".

    ``add(wheel, "2026-06-01")`` publishes a file uploaded at noon (UTC) of that day; ``url`` is
    the ``.../simple/`` base URL."""

    def __init__(self, root: Path):
        import functools
        import http.server
        import threading

        self.root = root
        (root / "files").mkdir(parents=True, exist_ok=True)
        self.files: dict[str, list[dict]] = {}
        handler = functools.partial(_JsonHandler, directory=str(root))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"

    def add(self, path: Path, day: str) -> None:
        import hashlib
        import json

        from packaging.utils import canonicalize_name, parse_wheel_filename

        name = canonicalize_name(parse_wheel_filename(path.name)[0])
        shutil.copy(path, self.root / "files" / path.name)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        self.files.setdefault(name, []).append({"filename": path.name, "url": f"../../files/{path.name}",
                                                "hashes": {"sha256": digest}, "upload-time": f"{day}T12:00:00Z",
                                                "size": path.stat().st_size})
        page = self.root / "simple" / name
        page.mkdir(parents=True, exist_ok=True)
        (page / "index.json").write_text(json.dumps({"meta": {"api-version": "1.1"}, "name": name,
                                                     "files": self.files[name], "versions": []}))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _json_handler_base():
    import http.server

    class Handler(http.server.SimpleHTTPRequestHandler):
        """A project page (``/simple/NAME/``) as PEP 691 JSON; 404 for a project it does not have."""

        def do_GET(self) -> None:
            parts = [p for p in self.path.split("?")[0].split("/") if p]
            if len(parts) == 2 and parts[0] == "simple":
                page = Path(self.directory) / "simple" / parts[1] / "index.json"
                if not page.is_file():
                    self.send_error(404)
                    return
                data = page.read_bytes()
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            super().do_GET()

        def log_message(self, *args) -> None:
            pass

    return Handler


_JsonHandler = _json_handler_base()


def _quiet_handler_base():
    import http.server

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    return Handler


_QuietHandler = _quiet_handler_base()
