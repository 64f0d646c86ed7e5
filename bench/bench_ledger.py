"""What one /ledger.json costs the app with many distinct paths stored, for this tree and another git
revision side by side.

    cd bench && ../.venv/bin/python bench_ledger.py [REVISION]   # default: HEAD~5

For 10,000, 100,000 and 1,000,000 rows of (today, gptbot, a distinct path) in a fresh site.db, five
calls of the production reader (`feeds.ledger.ledger`) in a fresh interpreter of each tree: the
first (after a job run) and the best of the other four. The rows stand for what a spoofed crawler
could once store: each spelling of a page's path (/%61bout, //about) had a row of its own; the job
now counts the path as the site routed it, and the reader keeps its answer until the job's next run.
"""
from __future__ import annotations

import functools
import sys

from revisions import run_probe, side_by_side

PROBE = r"""
import dataclasses, json, sys, tempfile, time
from pathlib import Path
root = Path(sys.argv[1]); sys.path.insert(0, str(root))
from siteapi import db
from siteapi.config import load_settings
from siteapi.feeds.ledger import ledger
folder = Path(tempfile.mkdtemp())
settings = dataclasses.replace(load_settings(root / "site.toml"), access_log=folder / "access.log")
out = {}
for rows in (10_000, 100_000, 1_000_000):
    path = folder / f"rows_{rows}.db"
    conn = db.writer(path)
    conn.execute("INSERT INTO ledger_state VALUES (1, 'access.log', 0, 'x', 0, ?, 0, 0, 0)", (db.now_iso(),))
    day = time.strftime("%Y-%m-%d", time.gmtime())
    conn.executemany("INSERT INTO ledger_hits VALUES (?, 'gptbot', ?, 1)", ((day, f"/{i:08d}") for i in range(rows)))
    conn.close()
    reader, at = db.connect(path, readonly=True), dataclasses.replace(settings, db_path=path)
    times = []
    for _ in range(5):
        started = time.perf_counter()
        ledger(reader, at)
        times.append(time.perf_counter() - started)
    out[rows] = {"first": times[0] * 1000, "later": min(times[1:]) * 1000}
print(json.dumps(out))
"""


def main() -> None:
    revision = sys.argv[1] if len(sys.argv) > 1 else "HEAD~5"
    figures = side_by_side(revision, functools.partial(run_probe, PROBE), rounds=2)
    print(f"## /ledger.json with many paths stored (bench_ledger.py {revision})\n")
    print(f"| rows in the window | first call: this tree / {revision} (ms) | later calls: this tree / {revision} (ms) |"
          "\n|---|---|---|")
    for rows in figures["this tree"][0]:
        first = {name: min(r[rows]["first"] for r in runs) for name, runs in figures.items()}
        later = {name: min(r[rows]["later"] for r in runs) for name, runs in figures.items()}
        print(f"| {int(rows):,} | {first['this tree']:.0f} / {first[revision]:.0f} "
              f"| {later['this tree']:.2f} / {later[revision]:.0f} |")

if __name__ == "__main__":
    main()
