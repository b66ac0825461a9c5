"""pip's index settings, merged as pip merges them (pip's ``configuration.py``): ``PIP_*``
variables over ``PIP_CONFIG_FILE`` over the site's, the user's and the global ``pip.conf``;
``[install]`` over ``[global]``.  See ``indexes`` for when they count at all.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from pathlib import Path

from dsbisect.core.errors import InputError
from dsbisect.core.files import read_small_text
from dsbisect.envs.indexlayer import FALSE, TRUE, Entry, Layer, absolute, location, one_line, shown

# pip.conf keys that decide whether an index can be reached at all (noted when dropped).
_PIP_NETWORK_KEYS = ("cert", "client-cert", "trusted-host", "proxy", "keyring-provider")


def pip_layer(env: Mapping[str, str], cwd: Path, home: Path, etc: Path, notes: list[str],
               files: list[str]) -> Layer:
    """pip's index settings, merged as pip merges them (pip's ``configuration.py``)."""
    values = _pip_values(env, cwd, home, etc, files)

    def get(key: str) -> tuple[str, str] | None:
        for section in (":env:", "install", "global"):
            if (section, key) in values:
                return values[(section, key)]
        return None

    layer = Layer()
    if got := get("index-url"):
        layer.entries.append(Entry(location(got[0].strip(), cwd), got[1], default=True))
    if got := get("extra-index-url"):
        layer.entries += [Entry(location(u, cwd), got[1]) for u in got[0].split()]
    if got := get("find-links"):
        layer.find_links = [(location(u, cwd), got[1]) for u in got[0].split()]
    if got := get("no-index"):
        flag = got[0].strip().lower()
        if flag not in TRUE | FALSE:
            raise InputError(f"{got[1]}: no-index = {got[0].strip()!r} is not a boolean (yes/no, true/false, 1/0)")
        layer.no_index = (flag in TRUE, got[1])
    for key in _PIP_NETWORK_KEYS:
        got = get(key)
        if got and got[1].startswith("pip.conf"):  # a PIP_ variable would outrank the file and stay
            notes.append(f"{got[1]}: {key} not applied: dsbisect runs pip with PIP_CONFIG_FILE={os.devnull} "
                         f"(set PIP_{key.upper().replace('-', '_')} instead)")
    return layer


def _pip_files(env: Mapping[str, str], cwd: Path, home: Path, etc: Path) -> list[Path]:
    """The pip.conf files pip reads, weakest first."""
    config_file = env.get("PIP_CONFIG_FILE")
    read: list[Path] = []
    if config_file != os.devnull:
        xdg_dirs = (env.get("XDG_CONFIG_DIRS", "").strip() or str(etc / "xdg")).split(":")
        read += [Path(d) / "pip" / "pip.conf" for d in xdg_dirs if d] + [etc / "pip.conf"]  # global
        if not (config_file and absolute(config_file, cwd).exists()):  # pip skips the user's files then
            xdg = env.get("XDG_CONFIG_HOME", "").strip()
            read += [home / ".pip" / "pip.conf", (Path(xdg) if xdg else home / ".config") / "pip" / "pip.conf"]
        if env.get("VIRTUAL_ENV"):
            read.append(Path(env["VIRTUAL_ENV"]) / "pip.conf")  # site
        if config_file:
            read.append(absolute(config_file, cwd))  # PIP_CONFIG_FILE outranks them all (pip's code and docs since 23.1)
    return read


def _pip_values(env: Mapping[str, str], cwd: Path, home: Path, etc: Path,
                files: list[str]) -> dict[tuple[str, str], tuple[str, str]]:
    """(section, key) -> (value, origin) of pip's files and ``PIP_*`` variables, the stronger last."""
    values: dict[tuple[str, str], tuple[str, str]] = {}
    for path in _pip_files(env, cwd, home, etc):
        if not path.is_file():
            continue
        where = f"pip.conf {shown(path, home)}"
        files.append(where)
        parser = configparser.RawConfigParser()
        try:
            parser.read_string(read_small_text(path), source=str(path))
        except OSError as e:
            raise InputError(f"{where}: cannot read it ({e.strerror or e})") from None
        except (configparser.Error, UnicodeDecodeError) as e:
            raise InputError(f"{where}: not a valid pip configuration file ({one_line(e)})") from None
        for section in ("global", "install"):
            if parser.has_section(section):
                for key, value in parser.items(section):
                    if value.strip():  # pip ignores empty values
                        values[(section, key.lower().replace("_", "-"))] = (value, where)
    for name, value in env.items():
        if name.startswith("PIP_") and value.strip():
            values[(":env:", name[4:].lower().replace("_", "-"))] = (value, name)
    return values
