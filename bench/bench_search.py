"""/search.json under load, side by side with the stack's ceiling and with Datasette's FTS query.

    .venv/bin/python bench/bench_search.py [seconds]

Starts, one after the other on loopback ports: app.py (waitress, 8 threads) on a freshly built
site.db, the constant-JSON Bottle app in bench/ceiling_app.py under the same waitress settings,
and Datasette serving the same site.db; drives each with wrk (2 threads, 32 connections) and
prints a Markdown section. The read quota is raised (SITE_RATE_READ_Q) so that the benchmark
measures serving rather than refusing.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from wrkstack import ROOT, free_port, process, python, wrk

sys.path.insert(0, str(ROOT))
from siteapi.stack import datasette_command  # noqa: E402

QUERY = "carburetor jets"


def main(seconds: int = 10) -> str:
    tmp = Path(tempfile.mkdtemp())
    env = {"SITE_DB_PATH": str(tmp / "site.db"), "SITE_RATE_READ_Q": "100000000"}
    import subprocess
    subprocess.run([python(), "jobs.py", "run", "content"], cwd=ROOT, env={**__import__("os").environ, **env},
                   check=True, capture_output=True)
    rows = {}
    port = free_port()
    with process([python(), "app.py"], f"http://127.0.0.1:{port}/robots.txt", {**env, "SITE_PORT": str(port)}):
        rows["/search.json (app.py)"] = wrk(f"http://127.0.0.1:{port}/search.json?q=carburetor+jets", seconds=seconds)
    port = free_port()
    with process([python(), "bench/ceiling_app.py"], f"http://127.0.0.1:{port}/const.json", {"SITE_PORT": str(port)}):
        rows["constant JSON (ceiling)"] = wrk(f"http://127.0.0.1:{port}/const.json", seconds=seconds)
    port = free_port()
    with process(datasette_command(tmp / "site.db", port), f"http://127.0.0.1:{port}/"):
        rows["Datasette FTS (canned search_pages)"] = wrk(
            f"http://127.0.0.1:{port}/site/search_pages.json?q=carburetor+jets&_shape=array", seconds=seconds)
    search, ceiling, data = (rows[k]["rps"] for k in rows)
    lines = ["## /search.json vs the stack's ceiling vs Datasette", "",
             f"`.venv/bin/python bench/bench_search.py {seconds}` — wrk, 2 threads, 32 connections, {seconds} s each, "
             "one after the other on the same machine; read quota raised with SITE_RATE_READ_Q.", "",
             "| target | requests/s | p50 ms | p99 ms | non-2xx |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {r['rps']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} | {r['errors']} |" for name, r in rows.items()]
    lines += ["", f"- /search.json ÷ ceiling: **{search / ceiling:.2f}** (target ≥ 0.70)",
              f"- /search.json ÷ Datasette: **{search / data:.1f}×** (target ≥ 5×)",
              f"- /search.json p99: **{rows['/search.json (app.py)']['p99']:.1f} ms** (target ≤ 50 ms)", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
