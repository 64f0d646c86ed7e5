"""The app's own cost per request, in process, for this tree and another git revision side by side.

    cd bench && ../.venv/bin/python bench_request_cost.py [REVISION]   # default: HEAD~10

wrk's ratios move with the machine's load by several hundredths from run to run; this tells a
slower request path from a noisy run. Each tree (this one, and REVISION checked out in a temporary
git worktree) builds its own site.db from content/ and answers cached /search.json?q=garage
requests through its WSGI app called directly, 508 callers in turn with the quotas raised: 7 runs
of 5,000 requests after 2,000 to warm up, median microseconds a request. The two trees run in
turn in fresh interpreters, four times each; the ratio compares the best of each (the run least
disturbed by the rest of the machine).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from revisions import side_by_side

PROBE = r"""
import dataclasses, io, os, statistics, sys, tempfile, time
from pathlib import Path
root = Path(sys.argv[1]); sys.path[:0] = [str(root)]; os.chdir(root)
import jobs
from app import make_app
from siteapi.config import RatePolicy, load_settings
base = load_settings(root / "site.toml")
settings = dataclasses.replace(base, db_path=Path(tempfile.mkdtemp()) / "site.db",
                               rates={n: RatePolicy(p.name, 10**9, p.window) for n, p in base.rates.items()})
done, summary = jobs.run_job(settings, "content"); assert done, summary
app = make_app(settings).wsgi
def call(i):
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/search.json", "QUERY_STRING": "q=garage",
               "REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": f"203.0.{i % 2}.{i % 254 + 1}",
               "SERVER_NAME": "x", "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.url_scheme": "http",
               "wsgi.input": io.BytesIO(b"")}
    return b"".join(app(environ, lambda status, headers, exc_info=None: None))
for i in range(2000):
    call(i)
runs = []
for _ in range(7):
    started = time.perf_counter()
    for i in range(5000):
        call(i)
    runs.append((time.perf_counter() - started) / 5000 * 1e6)
print(statistics.median(runs))
"""


def cost(tree: Path) -> float:
    out = subprocess.run([sys.executable, "-c", PROBE, str(tree)], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    revision = sys.argv[1] if len(sys.argv) > 1 else "HEAD~10"
    figures = side_by_side(revision, cost, rounds=4)
    print(f"## The app's cost per cached /search.json request (bench_request_cost.py {revision})\n")
    print("| tree | µs a request, four interpreters |\n|---|---|")
    for name, values in figures.items():
        print(f"| {name} | {' / '.join(f'{v:.1f}' for v in values)} |")
    mine, theirs = min(figures["this tree"]), min(figures[revision])
    print(f"\nThis tree ÷ {revision}: **{mine / theirs:.2f}** of the time a request (best of each; below 1 is faster).")


if __name__ == "__main__":
    main()
