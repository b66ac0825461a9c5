"""Secrets out of what dsbisect shows: URL credentials and secret-looking variables.

Reports are pasted into public GitHub issues.  Whatever dsbisect prints, records for
display (a skip's reason, a signature) or renders (the "Reproduce with" line, log tails) goes
through ``redact``; the runs themselves still get the real values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.I)
# a scheme glued to what precedes it (1.0https://, _https://) is a URL too: no word boundary asked
_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][\w+.-]*://)(?P<userinfo>[^/\s@'\"]+)@")
# NAME=value, but not a requirement's ==, <=, >=, != or ~= (tokenizers==0.15.2 is no secret)
_ASSIGNMENT = re.compile(r"(?P<name>\b[A-Za-z_][A-Za-z0-9_]*)(?<![=<>!~])=(?!=)(?P<value>\"[^\"]*\"|'[^']*'|[^\s'\";&|,]+)")
HIDDEN = "***"


def redact(text: str) -> str:
    """``text`` with URL credentials and the values of secret-looking ``NAME=value`` hidden."""
    if not text:
        return text
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{HIDDEN}@", text)
    return _ASSIGNMENT.sub(lambda m: f"{m['name']}={HIDDEN}" if SECRET_NAME.search(m["name"]) else m[0], text)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` for display: secret-looking names get ``***``, URLs lose their credentials."""
    return {k: HIDDEN if SECRET_NAME.search(k) else redact(v) for k, v in env.items()}
