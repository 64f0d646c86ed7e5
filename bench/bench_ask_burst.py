"""/ask under a burst of questions made to overrun: memory kept, time taken and what a bystander
waits, for this tree and another git revision side by side.

    cd bench && ../.venv/bin/python bench_ask_burst.py [REVISION]   # default: HEAD~5

Each tree (this one, and REVISION in a temporary git worktree) builds its own site.db from
content/ and serves its app under waitress on a loopback port with site.toml's settings (250 ms
deadline), in a fresh interpreter. After one short question, one caller sends 8 questions at once,
each 5 KB with ten 1,000-character earlier questions in `prev` (what the /ask audit found), while
another caller asks a short question every 50 ms. Reported: the app's RSS after the short question
and after the burst, the burst's wall time, how the 8 were ranked, and the bystander's median
answer time during the burst. Each tree runs twice, in turn.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from revisions import side_by_side

PROBE = r"""
import collections, concurrent.futures as cf, dataclasses, json, os, statistics, sys, tempfile, threading, time
from pathlib import Path
root = Path(sys.argv[1]); sys.path[:0] = [str(root), str(root / "tests")]; os.chdir(root)
import httpx
import jobs
from app import make_app
from servers import serve_wsgi
from siteapi.config import load_settings
settings = dataclasses.replace(load_settings(root / "site.toml"), db_path=Path(tempfile.mkdtemp()) / "site.db")
done, summary = jobs.run_job(settings, "content"); assert done, summary
def rss():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1]) // 1024
prev = ",".join(["valve clearance carburetor float height jets " * 22] * 10)
with serve_wsgi(make_app(settings).wsgi) as url:
    def ask(params, caller):
        with httpx.Client(base_url=url, timeout=60, headers={"X-Forwarded-For": caller}) as client:
            started = time.perf_counter()
            body = client.get("/ask", params={"streaming": "0", **params}).json()
            return body["_meta"]["ranking"], time.perf_counter() - started
    ask({"query": "carburetor"}, "203.0.113.1")
    before = rss()
    stop, waits = threading.Event(), []
    def bystander():
        while not stop.is_set():
            waits.append(ask({"query": "what float height does the carburetor use"}, "198.51.100.1")[1])
            time.sleep(0.05)
    watcher = threading.Thread(target=bystander); watcher.start()
    started = time.perf_counter()
    with cf.ThreadPoolExecutor(8) as pool:
        rankings = collections.Counter(r for r, _ in pool.map(
            lambda i: ask({"query": "valve clearance " * 300 + str(i), "prev": prev}, "203.0.113.2"), range(8)))
    burst = time.perf_counter() - started
    stop.set(); watcher.join()
    print(json.dumps({"before": before, "after": rss(), "burst_s": burst, "rankings": dict(rankings),
                      "bystander_ms": statistics.median(waits) * 1000 if waits else None}))
"""


def run(tree: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, str(tree)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    revision = sys.argv[1] if len(sys.argv) > 1 else "HEAD~5"
    figures = side_by_side(revision, run, rounds=2)
    print(f"## /ask: 8 questions made to overrun, at once (bench_ask_burst.py {revision})\n")
    print("| tree | RSS before → after (MB) | burst (s) | ranked | bystander's median answer (ms) |\n|---|---|---|---|---|")
    for name, runs in figures.items():
        for r in runs:
            ranked = ", ".join(f"{n} {k}" for k, n in sorted(r["rankings"].items()))
            print(f"| {name} | {r['before']} → {r['after']} | {r['burst_s']:.2f} | {ranked} | {r['bystander_ms']:.0f} |")
    grown = {name: min(r["after"] - r["before"] for r in runs) for name, runs in figures.items()}
    burst = {name: min(r["burst_s"] for r in runs) for name, runs in figures.items()}
    print(f"\nThis tree ÷ {revision}: memory grown by the burst **{grown['this tree'] / max(grown[revision], 1):.2f}**, "
          f"burst time **{burst['this tree'] / burst[revision]:.2f}** (best of each; below 1 is better).")


if __name__ == "__main__":
    main()
