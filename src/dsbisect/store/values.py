"""A run's values as the store keeps them: the columns of a run (a row of the index and its
record, ``run.json``, hold the same), the types each may hold, what is checked before a record
or a row is read as a run, what is masked and capped before one is written, and the record
file itself (written whole, then renamed into place).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from dsbisect.core import disk
from dsbisect.core.errors import DiskFull
from dsbisect.core.model import Outcome, Point, RunStatus
from dsbisect.core.redact import mask_text, redact_tree
from dsbisect.core.rundir import RunDir
from dsbisect.records.bisections import BisectionRecord
from dsbisect.store import bounds

RECORD_FORMAT = 1
RUN_COLUMNS = ("id", "case_name", "case_key", "point_key", "point", "env_key", "attempt", "status", "outcome",
               "exit_code", "seconds", "started", "finished", "reason", "run_dir", "signature", "evidence",
               "facts", "pid", "host", "folder", "heartbeat", "writer")
JSON_COLUMNS = ("point", "evidence", "facts")

_TYPES: dict[str, tuple[type, ...]] = {
    "id": (int,), "case_name": (str,), "case_key": (str,), "point_key": (str,), "point": (dict,),
    "env_key": (str, type(None)), "attempt": (int,), "status": (str,), "outcome": (str, type(None)),
    "exit_code": (int, type(None)), "seconds": (int, float, type(None)), "started": (int, float),
    "finished": (int, float, type(None)), "reason": (str,), "run_dir": (str, type(None)),
    "signature": (str,), "evidence": (dict,), "facts": (dict,), "pid": (int, type(None)),
    "host": (str, type(None)), "folder": (str, type(None)), "heartbeat": (int, float, type(None)),
    "writer": (str, type(None)),
}
_OPTIONAL = {"env_key", "outcome", "exit_code", "seconds", "finished", "run_dir", "pid", "host", "folder",
             "heartbeat", "writer", "signature", "reason", "evidence", "facts", "attempt"}
_DEFAULTS = {"signature": "", "reason": "", "evidence": {}, "facts": {}, "attempt": 1}


_NUM = (int, float)
# The keys of facts and evidence that reports and show read, with the types they read them as
# (a text or a number may be null, a list or an object may not): a record or row with anything
# else there is not readable.
_INNER: dict[str, dict[str, tuple[type, ...]]] = {
    "facts": {"python": (str,), "versions": (dict,), "cuda": (str,), "nccl": (str,), "nvcc": (str,),
              "gpus": (list,), "host": (dict,), "command": (list,), "inputs": (list,), "index": (str,),
              "shadowed": (list,), "accelerator": (str,), "slurm": (dict,)},
    "evidence": {"manual": (str,), "note": (str,), "notes": (list,), "survivors": (list,), "pids": (list,),
                 "escaped": (list,), "shm_removed": (list,), "hang_detected_after_s": _NUM, "files": (list,),
                 "taken": (list,)},
    "host": {"name": (str,), "topology": (str,), "gpus": (list,), "driver": (str,), "cpu_model": (str,),
             "ram_bytes": _NUM, "shm_bytes": _NUM},
    "source": {"package": (str,), "repo": (str,), "commit": (str,), "describe": (str,), "subject": (str,)},
}
_ITEMS = {("facts", "versions"): (str,), ("facts", "gpus"): (str,), ("facts", "inputs"): (dict,),
          ("facts", "command"): (str,), ("evidence", "notes"): (str,), ("evidence", "escaped"): (int,),
          ("evidence", "pids"): (int,), ("evidence", "files"): (str,)}


def _inner_problem(part: str, data: dict) -> str | None:
    """What a known key of ``data`` (facts, evidence, a host, a commit) holds that no run writes."""
    for key, types in _INNER[part].items():
        v = data.get(key)
        if v is None and key in data and types[0] in (list, dict):
            return f"{part}.{key} is null, not a {types[0].__name__}"
        if v is not None and (isinstance(v, bool) or not isinstance(v, types)):
            return f"{part}.{key} {v!r:.40} is not a {' or '.join(t.__name__ for t in types)}"
        items = _ITEMS.get((part, key))
        if items and v is not None:
            values = v.values() if isinstance(v, dict) else v
            if any(isinstance(x, bool) or not isinstance(x, items) for x in values):
                return f"{part}.{key} holds a value that is not a {items[0].__name__}"
        if key in _INNER and isinstance(v, dict):
            found = _inner_problem(key, v)
            if found:
                return found
    return None


def record_problem(data: object) -> str | None:
    """What makes ``data`` (a record or a row) not a run record, or None.  Fills defaults in."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__ if data is not None else 'null'}, not a run record"
    for c in RUN_COLUMNS:
        if c not in data or data[c] is None and c in _DEFAULTS:
            if c not in _OPTIONAL:
                return f"no {c}"
            data[c] = _DEFAULTS.get(c)
        v = data[c]
        if isinstance(v, bool) or not isinstance(v, _TYPES[c]):
            return f"{c} {v!r:.60} is not a {' or '.join(t.__name__ for t in _TYPES[c] if t is not type(None))}"
    if data["status"] not in {s.value for s in RunStatus}:
        return f"status {data['status']!r:.40} is not one of {', '.join(s.value for s in RunStatus)}"
    if data["outcome"] is not None and data["outcome"] not in {o.value for o in Outcome}:
        return f"outcome {data['outcome']!r:.40} is not one of {', '.join(o.value for o in Outcome)}"
    if data["status"] == "done" and data["outcome"] is None:
        return "a finished run without an outcome"
    versions, pins = data["point"].get("versions"), data["point"].get("pins", [])
    if not isinstance(versions, list) or not all(isinstance(x, list) and len(x) == 2 and
                                                 all(isinstance(y, str) for y in x) for x in versions):
        return "point.versions is not a list of [name, version]"
    if not isinstance(pins, list) or not all(isinstance(x, str) for x in pins):
        return "point.pins is not a list of requirements"
    source = data["point"].get("source")
    for part, inner in (("facts", data["facts"]), ("evidence", data["evidence"]),
                        ("source", source if isinstance(source, dict) else {})):
        found = _inner_problem(part, inner)
        if found:
            return found
    try:
        Point.from_json(data["point"])
    except (KeyError, TypeError, ValueError) as e:
        return f"point is not a point ({type(e).__name__}: {e})"
    return None


def row_values(row: sqlite3.Row) -> tuple[dict, str | None]:
    """A row of the index as record values (JSON columns read), and what is wrong with it."""
    values = {c: row[c] for c in row.keys() if c in RUN_COLUMNS}
    for c in JSON_COLUMNS:
        try:
            values[c] = json.loads(values[c]) if isinstance(values.get(c), str) else values.get(c)
        except ValueError:
            return values, f"{c} is not JSON"
    return values, record_problem(values)


def db_value(column: str, value: object) -> object:
    return json.dumps(value if value is not None else {}) if column in JSON_COLUMNS else value


def kept_point(point: dict) -> dict:
    """A point as the store keeps it: its pins' URL credentials masked (``Point.key`` is made
    from the same masked text, so the key and the stored point agree)."""
    return point | {"pins": [mask_text(p) if isinstance(p, str) else p for p in point.get("pins", [])]}


def kept(values: dict) -> dict:
    """A run's values as the store keeps them: secrets masked, sizes capped (``bounds``)."""
    out = dict(values)
    if isinstance(out.get("point"), dict):
        out["point"] = kept_point(out["point"])
    for c in ("reason", "signature", "evidence", "facts"):
        if out.get(c) is not None:
            out[c] = redact_tree(out[c])
    return bounds.capped(out)


def write_record(store: Path, values: dict) -> None:
    """The run's record as ``run.json`` in its folder (written whole, then renamed into place)."""
    folder = store / values["folder"] if values.get("folder") else None
    if folder is None:
        return
    target = folder / RunDir.RECORD
    tmp = target.with_name(target.name + ".tmp")
    try:
        folder.mkdir(parents=True, exist_ok=True)  # a run folder deleted by hand: the record still counts
        tmp.write_text(json.dumps({"format": RECORD_FORMAT} | values, indent=1))
        tmp.rename(target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if disk.is_full(e):
            raise DiskFull(disk.message(target)) from None
        raise


def bisection_of_row(row: sqlite3.Row) -> BisectionRecord:
    """A row of the bisections table as a record (a ValueError, TypeError or KeyError when it is none)."""
    return BisectionRecord.from_json(dict(row) | {"params": json.loads(row["params"]),
                                                  "result": json.loads(row["result"])})
