"""Secrets out of what dsbisect shows and keeps: by value, by shape and by known format.

Reports are pasted into public GitHub issues, and stores are shared with a group.  Three
rules, applied together by ``redact``:

- by value: every value of a secret-looking environment variable (of this process, and of
  the ranks' environment) and of a secret-looking option of a command line (``--hub_token v``,
  ``--api-key=v``) is masked wherever it appears, whatever surrounds it;
- by shape: ``NAME=value``, ``NAME = 'value'``, ``NAME: value``, ``"NAME": "value"``,
  ``'NAME': 'value'``, ``--name value``, ``Authorization: Bearer v``, URL credentials
  (``https://user:pass@host``) and a URL's signing parameters (``?sig=``,
  ``X-Amz-Signature=``), a netrc's ``password``/``account`` (``machine h login u password
  p``, on one line or several), where NAME is secret-looking;
- by format: Hugging Face, GitHub, OpenAI, Slack, GitLab, PyPI, npm, Stripe and Google API
  tokens, AWS access key ids, JWTs and ``Bearer`` tokens, and the body of a PEM private key
  (RSA, EC, OpenSSH, PGP, ...: also its halves when a text is read in blocks), anywhere.

``mask_text`` applies the shape and format rules alone: a pure function of the text, which
keys (a point's, a case's) are made from, so a rotated credential keeps the key.

A name is secret-looking when its last word (split at ``_``, ``-``, ``.`` and camelCase) is
one of ``SECRET_WORDS``: ``HF_TOKEN``, ``WANDB_API_KEY``, ``MY_DB_PASS``, ``hubToken`` are;
``KEYBOARD``, ``MONKEY``, ``TOKENIZERS_PARALLELISM``, ``SSH_AUTH_SOCK``, ``KeyError``,
``pad_token_id`` and ``eos_token`` are not.  The runs themselves still get the real values.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

HIDDEN = "***"
SECRET_WORDS = frozenset({
    "TOKEN", "SECRET", "PASS", "PASSWD", "PASSWORD", "PASSPHRASE", "KEY", "APIKEY", "CREDENTIAL", "CREDENTIALS",
    "AUTH", "AUTHORIZATION", "AUTHTOKEN", "ACCESSTOKEN", "ACCESSKEY", "SECRETKEY", "PRIVATEKEY", "COOKIE"})
_TRAILING = frozenset({"VALUE", "B64", "BASE64"})  # API_KEY_VALUE is still the key
_TOKEN_NOT_SECRET = frozenset({"EOS", "BOS", "PAD", "UNK", "SEP", "CLS", "MASK", "SPECIAL", "START", "END",
                               "NEXT", "MAX", "NUM", "IMAGE", "DECODER", "PREFIX", "SUFFIX", "MIDDLE"})
_KEY_NOT_SECRET = frozenset({"ENV", "CASE", "POINT", "CACHE", "SORT", "PRIMARY", "FOREIGN", "DICT", "MAP", "HASH",
                             "PARTITION", "ROUTING", "GROUP", "LOOKUP", "STATE", "RUN", "BISECTION", "SHARD",
                             "MODEL", "INPUT", "OUTPUT", "LABEL", "TEXT", "IMAGE", "CONFIG", "LOG", "METRIC"})
_NOT_A_VALUE = frozenset({"true", "false", "none", "null", "yes", "no", "on", "off", "unset", "default"})
MIN_VALUE = 6  # shorter values are masked by shape only (masking "abc" everywhere would hide the report)
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


@functools.lru_cache(maxsize=4096)
def secret_name(name: str) -> bool:
    """Does ``name`` (a variable, an option, a config key) look like it holds a secret?"""
    words = [w.upper() for w in _WORD.findall(name)]
    while len(words) > 1 and words[-1] in _TRAILING:
        words.pop()
    if not words or words[-1] not in SECRET_WORDS:
        return False
    if words[-1] == "KEY":  # a bare "key" or an env_key is a name, an API_KEY a secret
        return len(words) > 1 and words[-2] not in _KEY_NOT_SECRET
    return not (words[-1] == "TOKEN" and len(words) > 1 and words[-2] in _TOKEN_NOT_SECRET)


def _worth(value: str) -> bool:
    v = value.strip()
    return len(v) >= MIN_VALUE and v.lower() not in _NOT_A_VALUE and not v.isdigit() and HIDDEN not in v


# a scheme glued to what precedes it (1.0https://, _https://) is a URL too: no word boundary asked
_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][\w+.-]*://)(?P<userinfo>[^/\s@'\"]+)@")


def _url_secrets(text: str) -> set[str]:
    out = set()
    for m in _URL_USERINFO.finditer(text):
        user, _, password = m["userinfo"].partition(":")
        out |= {x for x in (m["userinfo"], password or user) if _worth(x)}
    return out


def secret_values(env: Mapping[str, str], argv: Sequence[str] = ()) -> frozenset[str]:
    """The values to mask everywhere: of ``env``'s secret-looking variables, of ``argv``'s
    secret-looking options (``--x_token v``, ``--x-token=v``, ``X_TOKEN=v``), and the
    credentials of URLs in either."""
    found: set[str] = set()
    for name, value in env.items():
        if secret_name(name) and _worth(value):
            found.add(value)
        found |= _url_secrets(value)
    args = [str(a) for a in argv]
    for i, a in enumerate(args):
        found |= _url_secrets(a)
        name, eq, value = a.lstrip("-").partition("=")
        if eq and secret_name(name) and _worth(value):
            found.add(value)
        elif not eq and a.startswith("-") and secret_name(name) and i + 1 < len(args) \
                and not args[i + 1].startswith("-") and _worth(args[i + 1]):
            found.add(args[i + 1])
    return frozenset(found)


def mask_args(argv: Sequence[str]) -> list[str]:
    """``argv`` with the values of its secret-looking options and ``NAME=value`` words masked,
    and every word through ``mask_text``: a pure function of the words (a case's key is the same
    in every process, whatever it was told or remembers)."""
    out = [str(a) for a in argv]
    for i, a in enumerate(out):
        name, eq, value = a.lstrip("-").partition("=")
        if eq and secret_name(name) and value:
            out[i] = a[: len(a) - len(value)] + HIDDEN
        elif not eq and a.startswith("-") and secret_name(name) and i + 1 < len(out) \
                and not out[i + 1].startswith("-"):
            out[i + 1] = HIDDEN
        else:
            out[i] = mask_text(out[i])
    return out


_remembered: set[str] = set()


def remember(values: Iterable[str]) -> None:
    """Mask these values too, for the rest of this process (a command line's, a case's)."""
    _remembered.update(v for v in values if _worth(v))


def known() -> frozenset[str]:
    """What this process masks by value: its environment's secrets and those remembered."""
    raw = getattr(os.environ, "_data", None)  # CPython's bytes mapping: a cheap key for the cache
    found = _environ_secrets(tuple(raw.items())) if isinstance(raw, dict) else secret_values(os.environ)
    return found | frozenset(_remembered) if _remembered else found


@functools.lru_cache(maxsize=8)
def _environ_secrets(_key: tuple) -> frozenset[str]:
    return secret_values(os.environ)


@functools.lru_cache(maxsize=64)
def _value_pattern(values: frozenset[str]) -> re.Pattern | None:
    forms = set()
    for v in values:
        forms |= {v, json.dumps(v)[1:-1], repr(v)[1:-1]}
    forms = {f for f in forms if len(f) >= MIN_VALUE}
    if not forms:
        return None
    return re.compile("|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True)))


_FORMATS = re.compile("|".join((
    r"\bhf_[A-Za-z0-9]{20,}",
    r"\bapi_org_[A-Za-z0-9]{20,}",
    r"\bpypi-Ag[A-Za-z0-9_-]{40,}",
    r"\bnpm_[A-Za-z0-9]{30,}",
    r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}",
    r"\bAIza[0-9A-Za-z_-]{35}",
    r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\beyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}",
    r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
    r"\bglpat-[A-Za-z0-9_-]{20,}",
)))
_FORMAT_ANCHORS = ("hf_", "gh", "github_pat_", "sk-", "AKIA", "ASIA", "eyJ", "xox", "glpat-", "api_org_", "pypi-",
                   "npm_", "_live_", "_test_", "AIza")
_BEARER = re.compile(r"(?i)(?P<word>\bbearer\s+)[A-Za-z0-9._~+/=-]{6,}")
_AUTH_HEADER = re.compile(r"(?i)(?P<head>\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?)"
                          r"(?:[A-Za-z]+[ \t]+)?[^\s\"',;]+")
_VALUE = r"(?P<value>\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|(?![{\[(])[^\s'\",;&|}\])]+)"
# A name whose last word is a secret word (``secret_name`` then decides): the pattern only
# matches candidates, so a log full of ``lr=0.001`` costs no Python call per line.
_TAIL = (r"(?i:token|secret|pass(?:wd|word|phrase)?|(?:api|access|secret|private)?key|credentials?"
         r"|auth(?:orization|token)?|accesstoken|cookie)(?i:[_.-]?(?:value|b64|base64))*")
_NAME = r"(?P<name>(?:[A-Za-z_][\w.-]*?)?" + _TAIL + r")(?![\w.-])"
_ASSIGNMENT = re.compile(
    r"(?P<head>(?P<q>[\"']?)(?<![\w.])" + _NAME + r"(?P=q)\]?[ \t]*"
    r"(?:(?<![=<>!~])=(?!=)|:(?!//|:))[ \t]*)" + _VALUE)
_OPTION = re.compile(r"(?P<head>(?<![\w-])--?" + _NAME.replace(r"(?![\w.-])", r"(?![\w-])") + r"[ \t]+)(?!-)" + _VALUE)


def _mask_shape(m: re.Match) -> str:
    """The value hidden; a quoted one keeps its quotes, and a JSON key's value becomes a string
    (a config copy stays valid JSON)."""
    if not secret_name(m["name"]):
        return m[0]
    value = m["value"]
    if value[0] in "\"'":
        return f"{m['head']}{value[0]}{HIDDEN}{value[0]}"
    return m["head"] + (f'"{HIDDEN}"' if m.groupdict().get("q") == '"' else HIDDEN)


def redact(text: str, values: Iterable[str] = ()) -> str:
    """``text`` with every secret this process knows of (and ``values``) masked, by value, shape
    and format."""
    if not text:
        return text
    pattern = _value_pattern(known() | frozenset(v for v in values if _worth(v)) if values else known())
    if pattern is not None:
        text = pattern.sub(HIDDEN, text)
    return mask_text(text)


def mask_text(text: str) -> str:
    """``text`` with the secrets its shapes and formats show masked (no value this process
    knows of: a pure function of ``text``)."""
    if not text:
        return text
    # each rule only where its anchor is (most text has none: a report calls this per cell)
    if "@" in text:
        text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{HIDDEN}@", text)
    if "://" in text and "=" in text:
        text = _URL_PARAM.sub(lambda m: m["head"] + HIDDEN, text)
    if "PRIVATE KEY" in text:
        text = _private_keys(text)
    if any(a in text for a in _FORMAT_ANCHORS):
        text = _FORMATS.sub(HIDDEN, text)
    lower = text.lower()
    if "authorization" in lower:
        text = _AUTH_HEADER.sub(lambda m: m["head"] + HIDDEN, text)
    if "bearer" in lower:
        text = _BEARER.sub(lambda m: m["word"] + HIDDEN, text)
    return _shapes(text, lower)


# A URL's signing parameters (presigned S3/GCS/Azure URLs): no secret-looking name, a secret value.
_URL_PARAM = re.compile(r"(?P<head>[?&](?i:sig|signature|x-amz-signature|x-amz-credential|x-goog-signature"
                        r"|x-goog-credential|x-ms-signature|code)=)[^&#\s'\"]+")
_KEY_KIND = r"[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?"
_PEM_HEADERS = r"(?:Proc-Type|DEK-Info|Version|Comment|Hash|Charset|MessageID)"  # RFC 1421 and OpenPGP armor
_PEM_MARK = re.compile(r"-----(?P<what>BEGIN|END) (?P<kind>" + _KEY_KIND + r")-----")
_PEM_BODY = re.compile(r"[ \t]*(?:[A-Za-z0-9+/=]+|" + _PEM_HEADERS + r": [^\n]*)?[ \t]*\r?")
_B64_LINE = re.compile(r"[ \t]*[A-Za-z0-9+/=]{16,}[ \t]*\r?")
_PEM_PAIR = 65536  # a BEGIN and the END of its kind at most this far apart are one key


def _private_keys(text: str) -> str:
    """Every PEM private key's body masked: between a BEGIN and the END of its kind; after a BEGIN
    with no END (its body and header lines); before an END with no BEGIN (the base64 lines: the
    second half of a key a text read in blocks cut in two).  One pass over the markers, each
    line looked at once at most, whatever the text holds."""
    marks, out, at = list(_PEM_MARK.finditer(text)), [], 0
    for i, m in enumerate(marks):
        if m.start() < at:
            continue
        nxt = marks[i + 1] if i + 1 < len(marks) else None
        if m["what"] == "BEGIN" and nxt is not None and nxt["what"] == "END" and nxt["kind"] == m["kind"] \
                and nxt.start() - m.end() <= _PEM_PAIR:
            out += [text[at:m.end()], f"\n{HIDDEN}\n"]
            at = nxt.start()
        elif m["what"] == "BEGIN":
            stop = _lines_while(text, m.end(), nxt.start() if nxt else len(text), _PEM_BODY)
            out += [text[at:m.end()], f"\n{HIDDEN}"] if stop > m.end() else []
            at = stop if stop > m.end() else at
        elif (nl := text.rfind("\n", at, m.start())) != -1:
            start = _lines_back_while(text, nl + 1, at, _B64_LINE)
            if start <= nl:
                out += [text[at:start], f"{HIDDEN}\n"]
                at = nl + 1
    return "".join(out) + text[at:] if out else text


def _lines_while(text: str, pos: int, limit: int, line: re.Pattern) -> int:
    """The end of the last of the whole lines after ``pos`` (up to ``limit``) that ``line``
    matches, one after another; ``pos`` when the first does not."""
    end = pos
    while True:
        start = text.find("\n", end, limit)
        if start == -1:
            return end
        stop = text.find("\n", start + 1, limit)
        stop = limit if stop == -1 else stop
        if stop <= start + 1 and stop == limit or not line.fullmatch(text, start + 1, stop):
            return end
        end = stop


def _lines_back_while(text: str, start: int, floor: int, line: re.Pattern) -> int:
    """The start of the first of the whole lines before the line starting at ``start`` (down to
    ``floor``) that ``line`` matches, one after another; ``start`` when the one before does not."""
    while start > floor:
        prev = text.rfind("\n", floor, start - 1) + 1
        prev = max(prev, floor)
        if not line.fullmatch(text, prev, start - 1):
            break
        start = prev
    return start


# a secret word and the letters that may follow it and still end a secret-looking name
_TAIL_WORDS = {"token": ("",), "secret": ("",), "pass": ("", "wd", "word", "phrase"), "key": ("",),
               "credential": ("", "s"), "auth": ("", "orization", "token"), "cookie": ("",),
               "account": ("",)}  # a netrc's account
_LETTERS = re.compile(r"[a-z]*")


def _shapes(text: str, lower: str) -> str:
    """The NAME=value and --name value rules, on the lines that hold a secret word only (no
    shape spans lines, and most lines of a long log hold none: found with str.find, which is
    far faster than a case-insensitive pattern)."""
    spans = set()
    for word, endings in _TAIL_WORDS.items():
        i = lower.find(word)
        while i != -1:
            j = i + len(word)
            if _LETTERS.match(lower, j).group() not in endings:  # tokens/s, keyboard: no name ends here
                i = lower.find(word, j)
                continue
            start, end = lower.rfind("\n", 0, i) + 1, lower.find("\n", i)
            end = len(text) if end == -1 else end
            spans.add((start, end))
            i = lower.find(word, end)
    pieces, last = [], 0
    for start, end in sorted(spans):
        line = text[start:end]
        if "=" in line or ":" in line:
            line = _ASSIGNMENT.sub(_mask_shape, line)
        if "pass" in line.lower() or "account" in line.lower():
            line = _netrc(line)
        pieces += [text[last:start], _OPTION.sub(_mask_shape, line) if "-" in line else line]
        last = end
    return "".join(pieces) + text[last:]


_NETRC_KEYS = frozenset({"machine", "login", "password", "passwd", "account", "port", "protocol"})
_NETRC_SECRET = frozenset({"password", "passwd", "account"})


# A netrc entry inside any text (an error that quotes one): ``machine h`` or ``default``, then
# keyword-value pairs.
_NETRC_ENTRY = re.compile(r"(?:\bmachine[ \t]+\S+|\bdefault\b)(?:[ \t]+(?:login|password|passwd|account|port|protocol)"
                          r"[ \t]+\S+)+")


def _netrc(line: str) -> str:
    """A line with the passwords and accounts of a netrc masked: a line of a netrc file (``machine
    h login u password p``, or ``password p`` alone: an entry written on several lines), or an
    entry quoted inside other text; any other line as it is."""
    words = list(re.finditer(r"\S+", line))
    masked, i = [], 0
    while i < len(words):
        w = words[i][0]
        if w == "default":
            i += 1
            continue
        if w not in _NETRC_KEYS or i + 1 == len(words):
            return _NETRC_ENTRY.sub(lambda m: _netrc(m[0]), line) if "machine" in line or "default" in line \
                else line
        if w in _NETRC_SECRET and HIDDEN not in words[i + 1][0]:
            masked.append(words[i + 1].span())
        i += 2
    for a, b in reversed(masked):
        line = line[:a] + HIDDEN + line[b:]
    return line


_OWN_KEYS = frozenset({"key", "env_key", "case_key", "point_key"})  # dsbisect's own digests, no secrets


def redact_tree(obj, values: Iterable[str] = ()):
    """A JSON-like value with every string redacted, and the values under secret-looking keys
    hidden whole (``{"hub_token": "x"}``)."""
    values = frozenset(values)
    if isinstance(obj, str):
        return redact(obj, values)
    if isinstance(obj, Mapping):
        return {k: HIDDEN if isinstance(k, str) and k not in _OWN_KEYS and secret_name(k) and _could_be_secret(k, v)
                else redact_tree(v, values) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_tree(v, values) for v in obj]
    return obj


_COUNTS = frozenset({"pass", "fail", "hang", "skip"})  # outcome names: a count under them is no secret


def _could_be_secret(key: str, v) -> bool:
    """A value under a secret-looking key that is hidden whole: any non-empty string, and a number
    unless the key is an outcome's name (``counts: {"pass": 1}`` of a bisect step is a count)."""
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        return False
    return bool(v) if isinstance(v, str) else key.lower() not in _COUNTS


SCRUB_LIMIT = 64 << 20  # larger files (none is, once logs are capped) are left as they are


def scrub_folder(folder: Path, values: Iterable[str] = (), skip: tuple[str, ...] = ()) -> list[str]:
    """Redact every text file under ``folder`` in place (each rewritten whole, then renamed into
    place); binary files (a NUL in their first 8 KB) and those named in ``skip`` are left.
    Returns notes on files that could not be rewritten."""
    values = frozenset(values)
    notes = []
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file() and not p.is_symlink()):
        if path.name in skip or path.name.endswith(".tmp"):
            continue
        try:
            scrub_file(path, values)
        except OSError as e:
            notes.append(f"{path.relative_to(folder)}: secrets not masked ({e.strerror or e})")
    return notes


def scrub_file(path: Path, values: frozenset[str] = frozenset(), block: int = 1 << 20) -> bool:
    """Redact one text file in place, a block of whole lines at a time (memory stays a few
    blocks, whatever the log's size); True when it changed."""
    if path.stat().st_size > SCRUB_LIMIT:
        return False
    tmp = path.with_name(path.name + ".scrub.tmp")
    changed = False
    try:
        with open(path, "rb") as src:
            if b"\0" in src.read(8192):
                return False
            src.seek(0)
            with open(tmp, "wb") as dst:
                while chunk := src.read(block):
                    chunk += src.readline(block)  # to the end of the line: a secret is not cut in two
                    text = chunk.decode("utf-8", errors="surrogateescape")
                    new = redact(text, values)
                    changed |= new != text
                    dst.write(new.encode("utf-8", errors="surrogateescape"))
        if changed:
            os.chmod(tmp, path.stat().st_mode & 0o7777)
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return changed
