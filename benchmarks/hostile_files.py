"""Peak memory of dsbisect on hostile files (issue 36, third battery): what one command costs
whatever a file it reads holds.

    .venv/bin/python benchmarks/hostile_files.py            # every case, prints a table
    .venv/bin/python benchmarks/hostile_files.py --mb 150   # the size of the huge field

Cases (each command a fresh process; its peak RSS from the kernel, RUSAGE_CHILDREN):

1. diff of two uv.locks of 38 MB (refused unread), of two at the cap (4 MB: read and parsed),
   and of two of 1 MB (a large real lock)
2. store repair of a store whose one run.json holds a field of --mb MB (the record is over the
   limit: quarantined unread), of the same with the database gone (rebuilt from the folders)
3. report --format json and show of a store whose index row holds a --mb MB value (an older
   dsbisect indexed the record whole): the row is left out and named, never loaded
4. the baseline: `dsbisect report --format json` of a store of 3 runs

Figures are printed, never asserted; the load average (1 min) is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "src")]

from dsbisect.core.model import Outcome, Point  # noqa: E402
from dsbisect.store.store import DB, Store  # noqa: E402


def peak(*args: str, cwd: Path) -> tuple[float, int, str]:
    """(peak RSS in MB, exit code, last stderr line) of ``dsbisect ARGS`` in a fresh process."""
    code = ("import resource, subprocess, sys\n"
            "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)\n"
            "print((p.stderr.strip().splitlines() or [''])[-1])\n")
    out = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "dsbisect", *args], cwd=cwd,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    kb, rc = out[0].split()
    return int(kb) / 1024, int(rc), out[1] if len(out) > 1 else ""


def uv_lock(path: Path, mb: float, bump: bool) -> None:
    """A uv.lock of about ``mb`` MB: packages with dependencies, an sdist and four wheels each."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.write('version = 1\nrevision = 2\nrequires-python = ">=3.10"\n\n')
        i = 0
        while f.tell() < mb * 1e6:
            name, ver = f"pkg{i:06d}", f"1.{i % 7}.{int(bump and i % 100 == 0)}"
            wheels = "".join(f'    {{ url = "https://files.example/{name}-{ver}-cp3{k}-manylinux.whl", '
                             f'hash = "sha256:{i:064x}", size = {1000 + i} }},\n' for k in range(10, 14))
            f.write(f'[[package]]\nname = "{name}"\nversion = "{ver}"\nsource = {{ registry = "https://pypi.org/simple" }}\n'
                    f'dependencies = [\n    {{ name = "pkg{i + 1:06d}" }},\n]\n'
                    f'sdist = {{ url = "https://files.example/{name}-{ver}.tar.gz", hash = "sha256:{i:064x}", size = {i} }}\n'
                    f"wheels = [\n{wheels}]\n\n")
            i += 1


def store(folder: Path, n: int = 3) -> None:
    st = Store(folder)
    for i in range(n):
        rid = st.start_run("toy", "k", Point(versions=(("dsb-toy", f"1.{i}.0"),)), "env", 1)
        st.finish_run(rid, Outcome.PASS, 0, 1.0)
    st.close()


def huge_record(folder: Path, mb: int) -> None:
    """Run 2's run.json with a field of ``mb`` MB (written a chunk at a time: this script stays small)."""
    path = folder / "runs" / "000002" / "run.json"
    data = json.loads(path.read_text())
    data["reason"] = "@@HUGE@@"
    head, tail = json.dumps(data).split('"@@HUGE@@"')
    with open(path, "w") as f:
        f.write(head + '"')
        for _ in range(mb):
            f.write("x" * (1 << 20))
        f.write('"' + tail)


def huge_row(folder: Path, mb: int) -> None:
    db = sqlite3.connect(folder / DB)
    db.execute("UPDATE runs SET reason=? WHERE id=2", ("x" * (mb << 20),))
    db.commit()
    db.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=150)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="dsbisect-hostile-") as tmp:
        work = Path(tmp)
        for mb in (38, 4, 1):
            uv_lock(work / f"g{mb}" / "uv.lock", mb if mb != 4 else 4.1, False)
            uv_lock(work / f"b{mb}" / "uv.lock", mb if mb != 4 else 4.1, True)
            rows.append((f"diff of two {mb} MB uv.locks", *peak("diff", f"g{mb}/uv.lock", f"b{mb}/uv.lock",
                                                                  "--format", "json", cwd=work)))
            shutil.rmtree(work / f"g{mb}"), shutil.rmtree(work / f"b{mb}")
        store(work / "base")
        rows.append(("report --format json, 3 runs (baseline)", *peak("report", "--store", "base", "--format", "json",
                                                                       cwd=work)))
        store(work / "rec")
        huge_record(work / "rec", args.mb)
        rows.append((f"store repair, a {args.mb} MB field in one run.json", *peak("store", "repair", "--store", "rec",
                                                                               cwd=work)))
        store(work / "rec2")
        huge_record(work / "rec2", args.mb)
        for p in (work / "rec2").glob(f"{DB}*"):
            p.unlink()
        rows.append(("store repair, the same, the database gone", *peak("store", "repair", "--store", "rec2", cwd=work)))
        store(work / "row")
        huge_row(work / "row", args.mb)
        rows.append((f"report --format json, a {args.mb} MB value in one row", *peak("report", "--store", "row",
                                                                                  "--format", "json", cwd=work)))
        rows.append(("show 2 of that row", *peak("show", "2", "--store", "row", cwd=work)))
        rows.append(("store repair of that store", *peak("store", "repair", "--store", "row", cwd=work)))
    load = os.getloadavg()[0]
    print("| case | peak RSS | exit | what dsbisect said (last line) |\n|---|---|---|---|")
    for what, mb, rc, said in rows:
        print(f"| {what} | {mb:.0f} MB | {rc} | {said[:110]} |")
    print(f"\nload average {load:.1f} (1 min), {time.strftime('%Y-%m-%d %H:%M')}, "
          f"python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
