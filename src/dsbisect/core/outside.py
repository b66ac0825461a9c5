"""Text from outside (a run's output, a reason, a stack, a commit subject, a case name, a
path) made safe to show: secrets masked, and inert on a terminal and in Markdown.

A rank's output can hold escape sequences (a terminal title, a hidden OSC-8 hyperlink,
clear-screen, cursor-up + erase-line that would rewrite the verdict lines, a carriage
return) and brackets that rich would read as markup (``[/]``, ``[link=…]``, ``[zero] fix``).
``safe`` shows every control character visibly (``\\x1b``) and ``safe_text`` makes a rich
``Text`` of it, which rich never parses as markup: every renderer takes outside text through
one of the two.
"""

from __future__ import annotations

import re

from rich.text import Text

from dsbisect.core.redact import redact

# C0 controls but tab and newline, DEL, C1, and the invisible ones that reorder or hide text
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")


def _visible(m: re.Match) -> str:
    c = ord(m[0])
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def inert(text: str) -> str:
    """``text`` with its control characters shown as ``\\x1b``-style text (a CRLF is a newline)."""
    if not text:
        return text
    return _CONTROL.sub(_visible, text.replace("\r\n", "\n"))


def safe(text: object) -> str:
    """Outside text for a terminal or Markdown: redacted, then inert."""
    return inert(redact("" if text is None else str(text)))


def clip(text: str, n: int) -> str:
    """``text`` in at most ``n`` characters, cut at a word's end with "…" (a word longer than
    half of that is cut where it must): never mid-word where a word's end is near."""
    if len(text) <= n:
        return text
    head = text[: n - 1]
    space = max(head.rfind(" "), head.rfind("\n"))
    return (head[:space] if space > n // 2 else head).rstrip(" ,;:\n") + "…"


def safe_text(text: object, style: str = "", **kwargs) -> Text:
    """``safe(text)`` as a rich ``Text`` (never markup)."""
    return Text(safe(text), style=style, **kwargs)
