"""Datasette under callers each within their budget: what a light page waits and how much memory
Datasette takes, for this tree and another git revision side by side.

    cd bench && ../.venv/bin/python bench_datasette_load.py [REVISION]   # default: 5bbe7a2

Each tree (this one, and REVISION in a temporary git worktree) builds its own site.db from content/
and runs its own Datasette as `make run` starts it (its plugins, settings and metadata), in a fresh
interpreter; callers are told apart by X-Forwarded-For, which Datasette trusts from 127.0.0.1 as it
does from Caddy. Two loads, each while a caller of its own asks for a one-row table page twice a
second:
- "slow queries": 2 callers, 2 connections each, running one-second SQL (stopped by
  sql_time_limit_ms) for 15 s;
- "large answers": 12 callers, 2 connections each, asking for 8 rows of a million control
  characters (8 MB as UTF-8, 48 MB as JSON) for 12 s.
Reported: the light page's median wait, the heavy requests' answers, and Datasette's peak RSS.
Each tree runs twice, in turn (see load_audit23 #2 and #3 for what this measures).
"""
from __future__ import annotations

import functools
import sys

from revisions import run_probe, side_by_side

PROBE = r"""
import collections, concurrent.futures as cf, dataclasses, json, os, socket, statistics, subprocess, sys, tempfile, threading, time
from pathlib import Path
import requests
root = Path(sys.argv[1]); sys.path[:0] = [str(root), str(root / "tests")]; os.chdir(root)
import jobs
from siteapi.config import load_settings
from siteapi.stack import datasette_command
settings = dataclasses.replace(load_settings(root / "site.toml"), db_path=Path(tempfile.mkdtemp()) / "site.db")
done, summary = jobs.run_job(settings, "content"); assert done, summary
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
base = f"http://127.0.0.1:{port}/data"
proc = subprocess.Popen(datasette_command(settings.db_path, port), cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def rss():
    try:
        return int(next(l for l in open(f"/proc/{proc.pid}/status") if l.startswith("VmRSS")).split()[1]) // 1024
    except (OSError, StopIteration):  # it has exited
        return 0
LOADS = {"slow queries": (2, 15, "with recursive c(x) as (select 1 union all select x + 1 from c) select count(*) from c"),
         "large answers": (12, 12, "select printf('%.*c', 1000000, char(1)) as v from pages limit 8")}
out = {}
try:
    for _ in range(300):
        try:
            if requests.get(base + "/", timeout=2).status_code == 200:
                break
        except requests.ConnectionError:
            time.sleep(0.1)
    for number, (name, (callers, seconds, sql)) in enumerate(LOADS.items()):
        stop, codes, waits, peak = time.monotonic() + seconds, collections.Counter(), [], [rss()]
        def heavy(caller):
            with requests.Session() as http:
                while time.monotonic() < stop:
                    try:
                        r = http.get(base + "/site.json", params={"sql": sql, "_shape": "array"},
                                     headers={"X-Forwarded-For": caller}, timeout=120)
                    except requests.ConnectionError:
                        codes["connection lost"] += 1
                        continue
                    codes[r.status_code] += 1
                    if r.status_code == 429:
                        time.sleep(1)
        def light():
            i = 0
            while time.monotonic() < stop:
                i += 1
                started = time.perf_counter()
                try:
                    requests.get(base + f"/site/pages.json?_size=1&_x={i}",
                                 headers={"X-Forwarded-For": f"198.51.{100 + number}.1"}, timeout=120)
                    waits.append(time.perf_counter() - started)
                except requests.ConnectionError:
                    waits.append(float("inf"))
                time.sleep(0.5)
        def watch():
            while time.monotonic() < stop + 2:
                peak.append(rss()); time.sleep(0.1)
        with cf.ThreadPoolExecutor(callers * 2 + 2) as pool:
            jobs_ = [pool.submit(heavy, f"203.0.{113 + number}.{c}") for c in range(callers) for _ in range(2)]
            jobs_ += [pool.submit(light), pool.submit(watch)]
            for job in jobs_:
                job.result()
        out[name] = {"light_ms": statistics.median(waits) * 1000, "codes": dict(codes), "peak_mb": max(peak),
                     "alive": proc.poll() is None}
finally:
    proc.terminate(); proc.wait(30)
print(json.dumps(out))
"""


def main(revision: str = "5bbe7a2") -> None:
    figures = side_by_side(revision, functools.partial(run_probe, PROBE), rounds=2)
    for name in ("slow queries", "large answers"):
        print(f"\n## Datasette under {name}, each caller within its budget (bench_datasette_load.py {revision})\n")
        print("| tree | light page's median wait (ms) | heavy requests' answers | Datasette's peak RSS (MB) | Datasette after |")
        print("|---|---|---|---|---|")
        for tree, runs in figures.items():
            for run in runs:
                codes = ", ".join(f"{n} × {code}" for code, n in sorted(run[name]["codes"].items()))
                print(f"| {tree} | {run[name]['light_ms']:.0f} | {codes} | {run[name]['peak_mb']} | "
                      f"{'running' if run[name]['alive'] else 'exited'} |")
        best = {tree: (min(r[name]["light_ms"] for r in runs), min(r[name]["peak_mb"] for r in runs))
                for tree, runs in figures.items()}
        wait, memory = (best["this tree"][i] / best[revision][i] for i in (0, 1))
        print(f"\nThis tree ÷ {revision}: light page's median wait **{wait:.2f}**, Datasette's peak RSS "
              f"**{memory:.2f}** (best of each; below 1 is better).")
    print(f"\nMeasured by `cd bench && ../.venv/bin/python bench_datasette_load.py {revision}`.")


if __name__ == "__main__":
    main(*sys.argv[1:2])
