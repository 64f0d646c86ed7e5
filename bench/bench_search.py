"""/search.json and /photos/query.json under load, side by side with the stack's ceiling and with
Datasette's FTS query.

    .venv/bin/python bench/bench_search.py [seconds]

Starts side by side on loopback ports: app.py (waitress, 8 threads) on a freshly built site.db
(the content plus 100,000 synthetic photo rows with caption vectors, as bench_photos.py makes
them), the constant-JSON Bottle app in bench/ceiling_app.py under app.py's waitress options, and
Datasette serving the same site.db; drives them in turn with wrk (2 threads, 32 connections),
several rounds, and prints a Markdown section with the median of each. The read quota is raised (SITE_RATE_READ_Q) so that the benchmark
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


ROUNDS = 3


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main(seconds: int = 10) -> str:
    tmp = Path(tempfile.mkdtemp())
    env = {"SITE_DB_PATH": str(tmp / "site.db"), "SITE_RATE_READ_Q": "1000"}
    subprocess.run([python(), "jobs.py", "run", "content"], cwd=ROOT, env={**os.environ, **env},
                   check=True, capture_output=True)
    settings = load_settings()
    with closing(db.writer(tmp / "site.db")) as conn:
        bench_photos.fill(conn, bench_photos.ROWS, ranker.model_for(settings))
    ports = [free_port() for _ in range(3)]
    app, ceiling, data = (f"http://127.0.0.1:{port}" for port in ports)
    searches, photo_queries = varied_queries()
    targets = {"/search.json, one query (app.py)": (f"{app}/search.json?q=carburetor+jets", None),
               "constant JSON (the ceiling)": (f"{ceiling}/const.json", None),
               "Datasette FTS (canned search_pages)": (f"{data}/site/search_pages.json?q=carburetor+jets&_shape=array", None)}
    once = {"/search.json, 4,000 different queries": (app, searches),
            "/photos/query.json, one query, 100k rows": (app + PHOTO_QUERY, None),
            "/photos/query.json, 4,000 different queries": (app, photo_queries)}
    runs: dict[str, list[dict]] = {name: [] for name in [*targets, *once]}
    # All three servers are up at once and driven in turn, round after round, so that a slow spell of
    # this shared machine lands on each of them instead of on whichever ran during it.
    with process([python(), "app.py"], f"{app}/robots.txt", {**env, "SITE_PORT": str(ports[0])}), \
            process([python(), "bench/ceiling_app.py"], f"{ceiling}/const.json", {"SITE_PORT": str(ports[1])}), \
            process(datasette_command(tmp / "site.db", ports[2]), f"{data}/"):
        requests.get(f"{app}{PHOTO_QUERY}", timeout=120)  # builds the in-memory photo index once
        for _ in range(ROUNDS):
            for name, (url, paths) in targets.items():
                runs[name].append(wrk(url, seconds=seconds, paths=paths))
        for name, (url, paths) in once.items():
            runs[name].append(wrk(url, seconds=seconds, paths=paths))
    rows = {name: {key: median([r[key] for r in results]) for key in ("rps", "p50", "p99", "errors")}
            for name, results in runs.items()}
    search, ceiling_rps, data_rps = (rows[name]["rps"] for name in targets)
    search_varied, photo, photo_varied = (rows[name]["rps"] for name in once)
    per_round = [(s["rps"] / c["rps"], s["rps"] / d["rps"]) for s, c, d in zip(*(runs[name] for name in targets))]
    lines = ["## /search.json vs the stack's ceiling vs Datasette", "",
             f"`.venv/bin/python bench/bench_search.py {seconds}` — wrk, 2 threads, 32 connections, {seconds} s a run. "
             f"The app, the ceiling (bench/ceiling_app.py, app.py's waitress options) and Datasette serve the same "
             f"site.db side by side and are driven in turn, {ROUNDS} rounds; the table gives each one's median run. "
             "Requests come from 508 callers (X-Forwarded-For from the trusted local proxy, as behind Caddy) with "
             "the read quota raised to 1,000 per minute (SITE_RATE_READ_Q), so every caller stays inside its "
             "budget and the run measures serving, not refusing. \"One query\" repeats a query (the per-thread "
             "response cache answers); \"4,000 different queries\" picks one at random per request, so most miss "
             "the cache (one run each).", "",
             "| target | requests/s | p50 ms | p99 ms | non-2xx |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {r['rps']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} | {r['errors']:.0f} |" for name, r in rows.items()]
    lines += ["", f"- /search.json ÷ ceiling: **{search / ceiling_rps:.2f}** (target ≥ 0.70); rounds: "
              f"{', '.join(f'{c:.2f}' for c, _ in per_round)}; with 4,000 different queries **{search_varied / ceiling_rps:.2f}**",
              f"- /search.json ÷ Datasette: **{search / data_rps:.1f}×** (target ≥ 5×); rounds: "
              f"{', '.join(f'{d:.1f}×' for _, d in per_round)}; with 4,000 different queries **{search_varied / data_rps:.1f}×**",
              f"- /search.json p99: **{rows['/search.json, one query (app.py)']['p99']:.1f} ms** (target ≤ 50 ms)",
              f"- /photos/query.json (q + camera + film over 100,000 rows) ÷ /search.json: **{photo / search:.2f}** "
              f"(target ≥ 0.50); with 4,000 different queries each **{photo_varied / search_varied:.2f}**", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
