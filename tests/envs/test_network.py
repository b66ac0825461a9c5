"""The network seam (envs.network): a transient error of an index read or of uv (a server's 5xx,
a connection reset, a DNS failure) is tried again with a backoff, each retry said, before it is
an error; an answer (a 404, a refused connection, a resolver's "no solution") is not.

Against real local http servers that fail their first requests, in front of a real simple index
(conftest's SimpleIndex): the index read with requests, and real uv installing from it.
"""

from __future__ import annotations

import functools
import http.server
import socket
import threading
from pathlib import Path

import pytest

import toypkg
from dsbisect.core.errors import EnvBuildError, ExternalFailure
from dsbisect.core.model import IndexOptions
from dsbisect.core.tell import listening
from dsbisect.envs import network, versions


class _Flaky(http.server.SimpleHTTPRequestHandler):
    """Serves the index folder, but answers its first ``fail`` requests with ``how``: a 503, or a
    connection closed without an answer (a reset)."""

    state: dict = {}

    def do_GET(self):
        st = self.state
        st["seen"] += 1
        if st["seen"] <= st["fail"]:
            if st["how"] == "reset":
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                self.connection.close()
                return
            self.send_response(st["how"])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture
def flaky(simple_index):
    """A server in front of ``simple_index``'s folder: ``flaky.state`` sets how many requests fail, and how."""
    state = {"seen": 0, "fail": 0, "how": 503}
    handler = functools.partial(type("Handler", (_Flaky,), {"state": state}), directory=str(simple_index.root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    server.state = state
    server.url = f"http://127.0.0.1:{server.server_address[1]}/simple/"
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    monkeypatch.setenv("DSBISECT_NET_BACKOFF", "0.05")  # 0.05, 0.1, 0.2 s: the same backoff, shorter
    versions._index_cached.cache_clear()


def _publish(tmp_path: Path, simple_index, dist: str) -> None:
    for version in ("1.0.0", "1.1.0"):
        simple_index.add(toypkg.build_wheel(tmp_path / "w", version, "ok", dist=dist))


@pytest.mark.parametrize("how, said", [(503, "HTTP 503"), (502, "HTTP 502"), ("reset", "the connection was reset")])
def test_an_index_that_fails_twice_then_answers_is_read_and_each_retry_said(tmp_path, simple_index, flaky, how, said):
    _publish(tmp_path, simple_index, f"dsb-net-{how}")
    flaky.state.update(fail=2, how=how)
    told: list[str] = []
    with listening(told.append):
        found = versions.releases(f"dsb-net-{how}", IndexOptions(index_url=flaky.url))
    assert [str(r.version) for r in found] == ["1.0.0", "1.1.0"]
    assert told == [f"reading dsb-net-{how} from the index {flaky.url}: {said}; trying again in 0.05 s (retry 1 of 3)",
                    f"reading dsb-net-{how} from the index {flaky.url}: {said}; trying again in 0.1 s (retry 2 of 3)"]


def test_an_index_that_keeps_failing_is_an_error_after_the_retries(tmp_path, simple_index, flaky):
    flaky.state.update(fail=99, how=503)
    told: list[str] = []
    with listening(told.append), pytest.raises(ExternalFailure, match="cannot read dsb-net-down from the index"):
        versions.releases("dsb-net-down", IndexOptions(index_url=flaky.url))
    assert len(told) == 3 and flaky.state["seen"] == 4  # the first try and three more


@pytest.mark.parametrize("how", [404, 403])
def test_an_answer_is_not_tried_again(tmp_path, simple_index, flaky, how):
    flaky.state.update(fail=99, how=how)
    told: list[str] = []
    with listening(told.append):
        try:
            found = versions.releases("dsb-net-answer", IndexOptions(index_url=flaky.url))
        except ExternalFailure:
            found = None
    assert told == [] and flaky.state["seen"] == 1 and not found


def test_a_refused_connection_is_said_at_once():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/simple/"
    told: list[str] = []
    with listening(told.append), pytest.raises(ExternalFailure):
        versions.releases("dsb-net-refused", IndexOptions(index_url=url))
    assert told == []


def test_uvs_words_for_a_network_failure_and_for_an_answer():
    dns = EnvBuildError("error: Failed to fetch: `https://pypi.org/simple/x/` Caused by: dns error: failed to lookup "
                        "address information: Temporary failure in name resolution")
    assert network.uv_cause(dns) == "a network error (dns error)"
    assert network.uv_cause(EnvBuildError("Request failed after 3 retries: HTTP status server error (503 Service "
                                          "Unavailable)")).startswith("a network error")
    assert network.uv_cause(EnvBuildError("× No solution found when resolving dependencies: because there is no "
                                          "version of dsb-x==9.0")) is None
    assert network.uv_cause(EnvBuildError("HTTP status client error (404 Not Found) for url")) is None


def test_the_backoff_doubles_and_zero_tries_nothing_again(monkeypatch):
    monkeypatch.setenv("DSBISECT_NET_BACKOFF", "1")
    assert network.delays() == (1.0, 2.0, 4.0)
    monkeypatch.setenv("DSBISECT_NET_BACKOFF", "0")
    assert network.delays() == ()


@pytest.mark.slow
def test_uv_installing_from_an_index_that_fails_first_is_tried_again_and_said(tmp_path, simple_index, flaky,
                                                                              monkeypatch):
    """Real uv, its own retries off (UV_HTTP_RETRIES=0), so that the 503s reach dsbisect's seam."""
    from dsbisect.envs.uv import Uv

    _publish(tmp_path, simple_index, "dsb-net-uv")
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    uv = Uv(tmp_path / "uvcache", IndexOptions(index_url=flaky.url))
    uv.venv(tmp_path / "venv", "python3")
    flaky.state.update(fail=1, how=503)
    told: list[str] = []
    with listening(told.append):
        uv.install(tmp_path / "venv", ["dsb-net-uv==1.1.0"])
    assert len(told) == 1 and told[0].startswith("uv pip install: a network error (") and "retry 1 of 3" in told[0]
    assert list((tmp_path / "venv").glob("lib/python*/site-packages/dsb_net_uv-1.1.0.dist-info"))
