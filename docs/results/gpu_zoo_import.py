#!/usr/bin/env python3
"""Bring the outputs of docs/results/gpu_zoo.sh stage Z (a folder holding its unpacked Z.tgz) into
zoo-runs/: each case's dsbisect JSON, with the paths of the GPU machine rewritten, and the
meta.json zoo_table.py reads (command, wall time, exit code, date, machine, dsbisect commit).

    python docs/results/gpu_zoo_import.py FOLDER --commit <dsbisect commit> --machine "..." [--suffix attempt1]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
PATHS = [
    (re.compile(r"/tmp/gz-[A-Z]/store-[a-z]"), "<store>"),
    (re.compile(r"/tmp/gz-cache-[a-z]"), "<cache>"),
    (re.compile(r"(/[\w.-]+)+/\.gpuzoo/(wh-acc|wh-s|wh|tool)"), "<wheelhouse>"),
    (re.compile(r"(/[\w.-]+)+/\.gpuzoo/(zoo|src)"), r"<repo>/\2"),
    (re.compile(r"/tmp/site"), "<tool>"),
]


def redact(text: str) -> str:
    for rx, word in PATHS:
        text = rx.sub(word, text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--machine", required=True)
    ap.add_argument("--limit-minutes", type=float, default=560 / 60)
    ap.add_argument("--suffix", default="", help="name the files <case>.<suffix>.json (a kept attempt)")
    args = ap.parse_args()
    truths = {e["case"]: e for e in json.loads((HERE / "zoo-truth-gpu.json").read_text())}
    for case, entry in truths.items():
        out, meta = args.folder / f"{case}.json", args.folder / f"{case}.meta"
        if not meta.exists():
            print(f"{case}: not run")
            continue
        m = json.loads(meta.read_text())
        name = f"{case}.{args.suffix}" if args.suffix else case
        if out.exists():
            (HERE / "zoo-runs" / f"{name}.json").write_text(redact(out.read_text()))
        command = (entry["command"] + " --offline --find-links <wheelhouse> --format json"
                   f" -o zoo-runs/{name}.json --store <store>")
        record = {
            "case": case, "command": command, "dsbisect_commit": args.commit, "first_run": args.commit,
            "exit_code": m["exit_code"], "interrupted": m["exit_code"] in (124, 130),
            "limit_minutes": args.limit_minutes, "seconds": float(m["seconds"]), "date": m["date"],
            "machine": args.machine,
        }
        (HERE / "zoo-runs" / f"{name}.meta.json").write_text(json.dumps(record, indent=2) + "\n")
        print(f"{case}: exit {m['exit_code']}, {m['seconds']} s")


if __name__ == "__main__":
    main()
