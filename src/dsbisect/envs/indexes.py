"""Where packages come from, resolved once: dsbisect's command line, then uv's settings, then pip's.

The release list, the installs (uv) and the builds (pip) must read one index configuration,
or the candidates come from a mirror while the installs come from elsewhere.  ``resolve``
reads what each tool would read and returns a ``Resolved``: the effective ``IndexOptions``
(complete: given with ``uv_args()`` to a uv that reads no configuration of its own, it gives
the same indexes), where each setting came from, and notes for the report.

Precedence, setting by setting:

1. the command line: ``--index-url`` replaces, ``--extra-index-url`` and ``--find-links``
   come first and add to what is configured, ``--offline``;
2. uv's own settings, combined as uv combines them (uv's docs, "Configuration files" and
   "Environment variables"; checked against uv 0.13 itself): the environment
   (``UV_DEFAULT_INDEX``, ``UV_INDEX``, ``UV_INDEX_URL``, ``UV_EXTRA_INDEX_URL``,
   ``UV_FIND_LINKS``, ``UV_OFFLINE``, ``UV_INDEX_STRATEGY``) before the configuration files
   (``UV_CONFIG_FILE`` alone if given, none with ``UV_NO_CONFIG``; else the nearest ``uv.toml``
   or ``pyproject.toml`` with ``[tool.uv]`` from the working directory up, then
   ``$XDG_CONFIG_HOME/uv/uv.toml`` (``~/.config/uv/uv.toml``), then the first
   ``$XDG_CONFIG_DIRS/uv/uv.toml`` (``/etc/xdg``) or ``/etc/uv/uv.toml``).  Strings and
   booleans: the nearer file wins; lists are joined, nearer first; ``[pip]`` wins over the
   top level.  uv takes the default index from the first of ``UV_DEFAULT_INDEX``,
   ``UV_INDEX_URL``, the files' ``[[index]]`` tables with ``default = true``, the files'
   ``index-url``;
3. pip's settings (pip's docs, "Configuration", and pip's ``configuration.py``): the
   environment (``PIP_INDEX_URL``, ``PIP_EXTRA_INDEX_URL``, ``PIP_FIND_LINKS``,
   ``PIP_NO_INDEX``) over ``PIP_CONFIG_FILE`` over ``$VIRTUAL_ENV/pip.conf`` over the user's
   files (``~/.config/pip/pip.conf`` over ``~/.pip/pip.conf``; not read when
   ``PIP_CONFIG_FILE`` names a file) over the global ones (``/etc/pip.conf`` over
   ``/etc/xdg/pip/pip.conf``); ``[install]`` over ``[global]`` whatever the file.  pip's
   settings count only when uv has none of its own about indexes: uv does the installs, and
   uv never reads pip's settings.  A pip setting left out this way is named in the notes.

What each tool's settings say is read in ``uvsettings`` and ``pipsettings`` (as a
``indexlayer.Layer``); this module ranks them and says where each setting came from.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dsbisect.core.model import IndexOptions, IndexStrategy
from dsbisect.core.redact import redact
from dsbisect.envs.indexlayer import Entry, Layer
from dsbisect.envs.pipsettings import pip_layer
from dsbisect.envs.uvsettings import uv_layer

PYPI = "https://pypi.org/simple/"

# Environment variables that decide uv's indexes; ``uv_child_env`` removes them (the resolved
# options say it all), and UV_CONFIG_FILE since it outranks --no-config in uv.
UV_INDEX_ENV = ("UV_DEFAULT_INDEX", "UV_INDEX", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS",
                "UV_OFFLINE", "UV_CONFIG_FILE", "UV_NO_INDEX")
PIP_INDEX_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_CONFIG_FILE")


# ------------------------------------------------------------------------- result


@dataclass(frozen=True)
class Resolved:
    """The effective index options and where each setting came from.

    ``index.index_url`` None means PyPI.  ``sources`` pairs each setting (``index_url``,
    ``extra_index_urls``, ``find_links``, ``offline``, ``index_strategy``) with where it came
    from: ``--index-url``, ``UV_INDEX_URL``, a uv file's path, ``PIP_INDEX_URL``,
    ``pip.conf ~/.config/pip/pip.conf``, or ``default``.  ``index.strategy`` is uv's
    (None: uv's default, ``first-index``), which ``IndexOptions`` does not carry.  ``notes``
    (credentials hidden) say what was left out and why; ``files`` are the configuration files read.
    """

    index: IndexOptions
    sources: tuple[tuple[str, str], ...]
    notes: tuple[str, ...] = ()
    files: tuple[str, ...] = ()

    @property
    def index_strategy(self) -> IndexStrategy | None:
        return self.index.strategy

    def source(self, setting: str) -> str:
        return dict(self.sources).get(setting, "default")

    def describe(self) -> str:
        """One line for reports, credentials hidden."""
        ix = self.index
        parts = []
        if ix.offline:
            parts.append(f"offline ({self.source('offline')})")
        else:
            parts.append(f"index {ix.index_url or PYPI} ({self.source('index_url')})")
            if ix.extra_index_urls:
                parts.append(f"extra {' '.join(ix.extra_index_urls)} ({self.source('extra_index_urls')})")
        if ix.find_links:
            parts.append(f"find-links {' '.join(ix.find_links)} ({self.source('find_links')})")
        if self.index_strategy and self.index_strategy is not IndexStrategy.FIRST_INDEX:
            parts.append(f"index-strategy {self.index_strategy.value} ({self.source('index_strategy')})")
        return redact("; ".join(parts))


def uv_child_env(env: Mapping[str, str], resolved: Resolved | None = None) -> dict[str, str]:
    """``env`` for a uv that must see only ``IndexOptions.uv_args()``: uv's index variables
    removed, its configuration files off (``UV_NO_CONFIG``), the resolved index strategy kept."""
    out = {k: v for k, v in env.items() if k not in UV_INDEX_ENV}
    out["UV_NO_CONFIG"] = "1"
    if resolved is not None and resolved.index_strategy:
        out["UV_INDEX_STRATEGY"] = resolved.index_strategy.value
    return out


def pip_child_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a pip that must see only ``IndexOptions.pip_args()``: pip's index variables
    removed and no configuration file read (pip adds its configured lists to the command line's)."""
    out = {k: v for k, v in env.items() if k not in PIP_INDEX_ENV}
    out["PIP_CONFIG_FILE"] = os.devnull
    return out


# ------------------------------------------------------------------------ resolve


def resolve(cli: IndexOptions, env: Mapping[str, str], cwd: Path, home: Path, *,
            etc: Path = Path("/etc")) -> Resolved:
    """The index settings dsbisect uses, from ``cli`` (the options given on its command line),
    then uv's environment and configuration files, then pip's (see the module's docstring).

    ``env``, ``cwd``, ``home`` and ``etc`` (the system configuration folder) are where the
    tools would look.  A malformed file or value raises ``InputError`` naming it.
    """
    cwd = Path(os.path.abspath(cwd))
    notes: list[str] = []
    files: list[str] = []
    uv, uv_offline, strategy = uv_layer(env, cwd, home, etc, notes, files)
    pip = pip_layer(env, cwd, home, etc, notes, files)
    if uv.says_anything():
        base = uv
        _note_pip_ignored(pip, uv, notes)
    else:
        base = pip
    default, extras, flat, links = _chosen(cli, base, notes)
    offline: tuple[bool, str] | None = (True, "--offline") if cli.offline else None
    if offline is None and uv_offline and uv_offline[0]:
        offline = uv_offline
    if offline is None and base.no_index and base.no_index[0]:
        offline = base.no_index
    _note_credentials(env, [*([default] if default else []), *extras, *flat], notes)
    used = [*([default.origin] if default else []), *(e.origin for e in extras), *(o for _, o in links),
            *([offline[1]] if offline else [])]
    if strategy is None and base is pip and set(used) & pip.origins() and (default or extras):
        strategy = (IndexStrategy.UNSAFE_BEST_MATCH, PIP_STRATEGY)  # pip's own way with several indexes: the best version of any
    index = IndexOptions(offline=bool(offline), find_links=tuple(v for v, _ in links),
                         index_url=default.url if default else None, extra_index_urls=tuple(e.url for e in extras),
                         strategy=IndexStrategy(strategy[0]) if strategy else None)
    sources = (
        ("index_url", default.origin if default else "default"),
        ("extra_index_urls", _origins(e.origin for e in extras)),
        ("find_links", _origins(o for _, o in links)),
        ("offline", offline[1] if offline else "default"),
        ("index_strategy", strategy[1] if strategy else "default"),
    )
    return Resolved(index=index, sources=sources, notes=tuple(redact(n) for n in dict.fromkeys(notes)),
                    files=tuple(dict.fromkeys(files)))


# Where the index strategy comes from when dsbisect decides it: pip's settings name several
# indexes, and pip takes the best version of any of them (uv's unsafe-best-match).
PIP_STRATEGY = "pip's settings, as pip would use them"


def _chosen(cli: IndexOptions, base: Layer, notes: list[str]):
    """The default index, the extra indexes and the find-links of the command line over ``base``
    (the tool whose settings count), as uv combines them."""
    cli_entries = ([Entry(cli.index_url, "--index-url", default=True)] if cli.index_url else []) + [
        Entry(u, "--extra-index-url") for u in cli.extra_index_urls]
    entries = _first_per_name(cli_entries + base.entries)
    default = next((e for e in entries if e.default and not e.flat), None)
    for e in entries:
        if e.default and not e.flat and default is not None and not _same(e.url, default.url):
            notes.append(f"{e.origin}: default index {e.url} not used: {default.origin} comes first")
        if e.default and e.flat:
            notes.append(f"{e.origin}: the flat index {e.url} marked default is used as --find-links; "
                         "the default index stays " + (default.url if default else "PyPI"))
    extras = _unique([e for e in entries if not e.default and not e.explicit and not e.flat],
                     skip=default.url if default else PYPI)
    flat = [e for e in entries if e.flat and (e.default or not e.explicit)]
    links = _unique_pairs([(_link(v), o) for v, o in [(d, "--find-links") for d in cli.find_links]
                           + base.find_links + [(e.url, e.origin) for e in flat]])
    return default, extras, flat, links


def _note_credentials(env: Mapping[str, str], entries: list[Entry], notes: list[str]) -> None:
    for e in entries:
        if e.name and any(f"UV_INDEX_{_env_name(e.name)}_{k}" in env for k in ("USERNAME", "PASSWORD")):
            notes.append(f"index {e.name!r} ({e.url}) takes credentials from UV_INDEX_{_env_name(e.name)}_*, "
                         "which uv gives only to a named index of its own configuration; "
                         "dsbisect passes the URL, so put them in ~/.netrc or the keyring")


def _note_pip_ignored(pip: Layer, uv: Layer, notes: list[str]) -> None:
    if not pip.says_anything():
        return
    why = _origins([e.origin for e in uv.entries if not e.explicit] + [o for _, o in uv.find_links]
                   + ([uv.no_index[1]] if uv.no_index else []))
    for e in pip.entries:
        what = "index-url" if e.default else "extra-index-url"
        notes.append(f"{e.origin}: {what} {e.url} ignored: uv has index settings of its own ({why}) and uv does the installs")
    for value, origin in pip.find_links:
        notes.append(f"{origin}: find-links {value} ignored: uv has index settings of its own ({why}) and uv does the installs")
    if pip.no_index:
        notes.append(f"{pip.no_index[1]}: no-index ignored: uv has index settings of its own ({why}) and uv does the installs")


# ------------------------------------------------------------------------ helpers


def _first_per_name(entries: list[Entry]) -> list[Entry]:
    """uv keeps the first index of each name."""
    seen: set[str] = set()
    out = []
    for e in entries:
        if e.name:
            if e.name in seen:
                continue
            seen.add(e.name)
        out.append(e)
    return out


def _same(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def _unique(entries: list[Entry], skip: str) -> list[Entry]:
    out: list[Entry] = []
    for e in entries:
        if not _same(e.url, skip) and not any(_same(e.url, o.url) for o in out):
            out.append(e)
    return out


def _unique_pairs(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for v, o in pairs:
        if not any(_same(v, w) for w, _ in out):
            out.append((v, o))
    return out


def _origins(origins) -> str:
    return ", ".join(dict.fromkeys(origins)) or "default"


def _link(value: str) -> str:
    """A find-links location: a ``file://`` URL becomes its path, which the release list can read."""
    if value.startswith("file://"):
        from urllib.parse import unquote, urlparse

        return unquote(urlparse(value).path)
    return value


def _env_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()
