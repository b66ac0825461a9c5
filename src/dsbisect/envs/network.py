"""The one seam for what dsbisect asks of a network: a transient error (a DNS failure, a
connection reset or timed out, a server's 5xx or 429) is tried again after a backoff, each retry
said to the user (``core.tell``), before it becomes a skip or an error; an answer (a 404, any
other 4xx, a resolver's "no solution") is never tried again.

``retried`` wraps one call; ``http_cause`` and ``uv_cause`` tell a transient failure from an
answer for an index read with requests and for a uv command, by what they raised or printed.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import TypeVar

from dsbisect.core.errors import InputError
from dsbisect.core.tell import tell

T = TypeVar("T")
RETRIES = 3
BACKOFF_S = 1.0  # before the first retry; doubled before each next one (1, 2, 4 s: seven seconds in all)


def delays() -> tuple[float, ...]:
    """The waits before each retry: ``DSBISECT_NET_BACKOFF`` seconds (default 1), doubled each
    time; 0 tries nothing again."""
    raw = os.environ.get("DSBISECT_NET_BACKOFF", "").strip()
    try:
        first = float(raw) if raw else BACKOFF_S
    except ValueError:
        first = -1.0
    if not 0 <= first <= 600:
        raise InputError(f"DSBISECT_NET_BACKOFF={raw}: give the seconds before the first retry of a network "
                         "error (e.g. 1), or 0 for none")
    return tuple(first * 2 ** k for k in range(RETRIES)) if first else ()

# What uv (and the resolvers and HTTP clients under it) print for a failure of the network, not of the request.
_UV_TRANSIENT = re.compile(
    r"dns error|failed to lookup address|temporary failure in name resolution|name or service not known"
    r"|connection reset|connection closed before message completed|broken pipe|network is unreachable"
    r"|error sending request|operation timed out|timed out|request or response body error"
    r"|\b(?:500 Internal Server Error|502 Bad Gateway|503 Service Unavailable|504 Gateway Time-?out)\b"
    r"|status(?: code)?:? 5\d\d\b|\b429 Too Many Requests\b", re.IGNORECASE)


def retried(call: Callable[[], T], what: str, cause: Callable[[BaseException], str | None],
            errors: tuple[type[BaseException], ...], waits: tuple[float, ...] | None = None,
            sleep: Callable[[float], None] = time.sleep) -> T:
    """``call()``; when it raises one of ``errors`` that ``cause`` names transient, said and
    tried again after each of ``waits`` (default ``delays()``; the last failure is raised as it came)."""
    delays_ = delays() if waits is None else waits
    for attempt in range(len(delays_) + 1):
        try:
            return call()
        except errors as e:
            why = cause(e)
            if why is None or attempt == len(delays_):
                raise
            tell(f"{what}: {why}; trying again in {delays_[attempt]:g} s (retry {attempt + 1} of {len(delays_)})")
            sleep(delays_[attempt])
    raise AssertionError("unreachable")  # the loop returns or raises


def http_cause(e: BaseException) -> str | None:
    """A requests error's transient cause in a few words; None for an answer (a 4xx, a bad URL)."""
    import requests

    if isinstance(e, requests.HTTPError):
        status = getattr(e.response, "status_code", None)
        return f"HTTP {status}" if status is not None and (status >= 500 or status == 429) else None
    if isinstance(e, (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema,
                      requests.exceptions.InvalidSchema)):
        return None
    if isinstance(e, requests.ConnectionError):
        text = str(e)
        if re.search(r"NameResolution|name resolution|Name or service not known|getaddrinfo", text):
            return "a DNS failure"
        if re.search(r"reset|aborted|RemoteDisconnected|closed", text, re.IGNORECASE):
            return "the connection was reset"
        return None  # refused: nothing listens there (a wrong URL is said at once)
    if isinstance(e, requests.Timeout):
        return "it timed out"
    return None


def uv_cause(e: BaseException) -> str | None:
    """uv's failure as a transient cause ("a network error: <its words>"), None for an answer."""
    found = _UV_TRANSIENT.search(str(e))
    return f"a network error ({found.group(0)})" if found else None
