"""/search.json and /photos/query.json under load, side by side with the stack's ceiling and with
Datasette's FTS query.

    .venv/bin/python bench/bench_search.py [seconds]

Starts, one after the other on loopback ports: app.py (waitress, 8 threads) on a freshly built
site.db (the content plus 100,000 synthetic photo rows with caption vectors, as bench_photos.py
makes them), the constant-JSON Bottle app in bench/ceiling_app.py under the same waitress settings,
and Datasette serving the same site.db; drives each with wrk (2 threads, 32 connections) and
prints a Markdown section. The read quota is raised (SITE_RATE_READ_Q) so that the benchmark
measures serving rather than refusing.
"""
from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

import requests

import bench_photos
from wrkstack import ROOT, free_port, process, python, wrk

sys.path.insert(0, str(ROOT))
from siteapi import db, ranker  # noqa: E402
from siteapi.config import load_settings  # noqa: E402
from siteapi.stack import datasette_command  # noqa: E402

PHOTO_QUERY = "/photos/query.json?q=beach+night&camera=x-t5&film=classic"


def varied_queries(count: int = 4000) -> tuple[list[str], list[str]]:
    """Distinct /search.json and /photos/query.json paths: word pairs from the content, filter mixes."""
    rng = random.Random(11)
    words = sorted({w for f in (ROOT / "content").rglob("*.md") for w in re.findall(r"[a-z]{5,}", f.read_text().lower())})
    searches = sorted({f"/search.json?q={a}+{b}" for a, b in (rng.sample(words, 2) for _ in range(count * 2))})[:count]
    cameras, films = ["x-t5", "x100", "x-pro3", "gr", ""], ["classic", "acros", "velvia", "reala", ""]
    photo_words = "beach harbour mountain street night market tram kite snow fog lake bridge cat dog".split()
    photo_queries = sorted({f"/photos/query.json?q={rng.choice(photo_words)}&camera={rng.choice(cameras)}"
                            f"&film={rng.choice(films)}&offset={rng.randrange(0, 200)}" for _ in range(count * 2)})[:count]
    return searches, photo_queries


def main(seconds: int = 10) -> str:
    tmp = Path(tempfile.mkdtemp())
    env = {"SITE_DB_PATH": str(tmp / "site.db"), "SITE_RATE_READ_Q": "1000"}
    subprocess.run([python(), "jobs.py", "run", "content"], cwd=ROOT, env={**os.environ, **env},
                   check=True, capture_output=True)
    settings = load_settings()
    with closing(db.writer(tmp / "site.db")) as conn:
        bench_photos.fill(conn, bench_photos.ROWS, ranker.load_model(ranker.RankerSettings.from_settings(settings)))
    rows = {}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    searches, photo_queries = varied_queries()
    with process([python(), "app.py"], f"{base}/robots.txt", {**env, "SITE_PORT": str(port)}):
        rows["/search.json, one query (app.py)"] = wrk(f"{base}/search.json?q=carburetor+jets", seconds=seconds)
        rows["/search.json, 4,000 different queries"] = wrk(base, seconds=seconds, paths=searches)
        requests.get(f"{base}{PHOTO_QUERY}", timeout=120)  # builds the in-memory photo index once
        rows["/photos/query.json, one query, 100k rows"] = wrk(base + PHOTO_QUERY, seconds=seconds)
        rows["/photos/query.json, 4,000 different queries"] = wrk(base, seconds=seconds, paths=photo_queries)
    port = free_port()
    with process([python(), "bench/ceiling_app.py"], f"http://127.0.0.1:{port}/const.json", {"SITE_PORT": str(port)}):
        rows["constant JSON (the ceiling)"] = wrk(f"http://127.0.0.1:{port}/const.json", seconds=seconds)
    port = free_port()
    with process(datasette_command(tmp / "site.db", port), f"http://127.0.0.1:{port}/"):
        rows["Datasette FTS (canned search_pages)"] = wrk(
            f"http://127.0.0.1:{port}/site/search_pages.json?q=carburetor+jets&_shape=array", seconds=seconds)
    search, search_varied, photo, photo_varied, ceiling, data = (rows[k]["rps"] for k in rows)
    lines = ["## /search.json vs the stack's ceiling vs Datasette", "",
             f"`.venv/bin/python bench/bench_search.py {seconds}` — wrk, 2 threads, 32 connections, {seconds} s each, "
             "one after the other on the same machine. Requests come from 508 callers (X-Forwarded-For from the "
             "trusted local proxy, as behind Caddy) with the read quota raised to 1,000 per minute "
             "(SITE_RATE_READ_Q), so every caller stays inside its budget and the run measures serving, not "
             "refusing. \"One query\" repeats a query (the per-thread response cache answers); \"4,000 different "
             "queries\" picks one at random per request, so most miss the cache.", "",
             "| target | requests/s | p50 ms | p99 ms | non-2xx |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {r['rps']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} | {r['errors']} |" for name, r in rows.items()]
    lines += ["", f"- /search.json ÷ ceiling: **{search / ceiling:.2f}** (target ≥ 0.70); "
              f"with 4,000 different queries **{search_varied / ceiling:.2f}**",
              f"- /search.json ÷ Datasette: **{search / data:.1f}×** (target ≥ 5×); "
              f"with 4,000 different queries **{search_varied / data:.1f}×**",
              f"- /search.json p99: **{rows['/search.json, one query (app.py)']['p99']:.1f} ms** (target ≤ 50 ms)",
              f"- /photos/query.json (q + camera + film over 100,000 rows) ÷ /search.json: **{photo / search:.2f}** "
              f"(target ≥ 0.50); with 4,000 different queries each **{photo_varied / search_varied:.2f}**", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
