"""/ask under bursts of questions: memory kept, time taken and what a bystander waits, for this tree
and another git revision side by side.

    cd bench && ../.venv/bin/python bench_ask_burst.py [REVISION]   # default: HEAD~5

Each tree (this one, and REVISION in a temporary git worktree) builds its own site.db from
content/ and serves its app under waitress on a loopback port with site.toml's settings (250 ms
deadline, 20 model questions a minute per caller), in a fresh interpreter. After one short
question come two kinds of burst, each five times from a new caller, while another caller asks a
short question every 50 ms:
- "overrun": 8 questions at once, each 5 KB with ten 1,000-character earlier questions in `prev`
  (what the /ask audit found), each certain to overrun its deadline;
- "budget": 20 questions of 1,000 characters at once, a caller's whole model budget for the minute.
Reported per kind: the app's RSS before and after, the median burst's wall time, how the burst's
questions were ranked, and the bystander's median answer time and how its questions were ranked.
Each tree runs twice, in turn.
"""
from __future__ import annotations

import functools
import sys

from revisions import run_probe, side_by_side

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
REPEATS = 5
BURSTS = {"overrun": (8, lambda i: {"query": "valve clearance " * 300 + str(i), "prev": prev}),
          "budget": (20, lambda i: {"query": "valve clearance carburetor float height " * 25 + str(i)})}
out = {}
with serve_wsgi(make_app(settings).wsgi) as url:
    def ask(params, caller):
        with httpx.Client(base_url=url, timeout=60, headers={"X-Forwarded-For": caller}) as client:
            started = time.perf_counter()
            body = client.get("/ask", params={"streaming": "0", **params}).json()
            return body["_meta"]["ranking"], time.perf_counter() - started
    ask({"query": "carburetor"}, "203.0.113.1")
    for number, (name, (count, question)) in enumerate(BURSTS.items()):
        before, bursts, rankings, waits = rss(), [], collections.Counter(), []
        for repeat in range(REPEATS):  # each from a caller of its own: one caller's budget is 20 a minute
            stop = threading.Event()
            def bystander():
                while not stop.is_set():
                    waits.append(ask({"query": "what float height does the carburetor use"}, f"198.51.{100 + number}.{repeat}"))
                    time.sleep(0.05)
            watcher = threading.Thread(target=bystander); watcher.start()
            started = time.perf_counter()
            with cf.ThreadPoolExecutor(count) as pool:
                rankings.update(r for r, _ in pool.map(
                    lambda i: ask(question(i), f"203.0.{113 + number}.{10 + repeat}"), range(count)))
            bursts.append(time.perf_counter() - started)
            stop.set(); watcher.join()
            time.sleep(0.5)
        out[name] = {"before": before, "after": rss(), "burst_s": statistics.median(bursts), "rankings": dict(rankings),
                     "bystander_ms": statistics.median(w for _, w in waits) * 1000 if waits else None,
                     "bystander": dict(collections.Counter(r for r, _ in waits))}
print(json.dumps(out))
"""


def main() -> None:
    revision = sys.argv[1] if len(sys.argv) > 1 else "HEAD~5"
    figures = side_by_side(revision, functools.partial(run_probe, PROBE), rounds=2)
    for burst, title in (("overrun", "8 questions made to overrun, at once"),
                         ("budget", "20 long questions at once (one caller's model budget for the minute)")):
        print(f"## /ask: {title} (bench_ask_burst.py {revision})\n")
        print("| tree | RSS before → after (MB) | burst (s) | ranked | bystander's median answer (ms) | bystander ranked |\n"
              "|---|---|---|---|---|---|")
        for name, runs in figures.items():
            for r in (run[burst] for run in runs):
                ranked = ", ".join(f"{n} {k}" for k, n in sorted(r["rankings"].items()))
                bystander = ", ".join(f"{n} {k}" for k, n in sorted(r["bystander"].items()))
                print(f"| {name} | {r['before']} → {r['after']} | {r['burst_s']:.2f} | {ranked} | {r['bystander_ms']:.0f} "
                      f"| {bystander} |")
        grown = {name: min(r[burst]["after"] - r[burst]["before"] for r in runs) for name, runs in figures.items()}
        took = {name: min(r[burst]["burst_s"] for r in runs) for name, runs in figures.items()}
        waited = {name: min(r[burst]["bystander_ms"] for r in runs) for name, runs in figures.items()}
        by_model = {name: sum(n for r in runs for k, n in r[burst]["bystander"].items() if k.startswith("model"))
                    / max(1, sum(n for r in runs for n in r[burst]["bystander"].values())) for name, runs in figures.items()}
        print(f"\nThis tree ÷ {revision}: memory grown by the burst **{grown['this tree'] / max(grown[revision], 1):.2f}**, "
              f"burst time **{took['this tree'] / took[revision]:.2f}**, bystander's median answer "
              f"**{waited['this tree'] / waited[revision]:.2f}** (best of each; below 1 is better). The bystander's "
              f"questions ranked by the model: {by_model['this tree']:.0%} here, {by_model[revision]:.0%} there.\n")


if __name__ == "__main__":
    main()
