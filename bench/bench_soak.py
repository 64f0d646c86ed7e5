"""Soak: the app under steady mixed traffic while the jobs keep rewriting site.db, as on the VPS
for days; does anything grow that should not (memory, open files, threads, the WAL)?

    .venv/bin/python bench/bench_soak.py [seconds]

Builds a site in a temporary folder (a copy of content/, the demo photos), starts app.py (waitress)
on a loopback port and drives it with wrk over the read endpoints (search, /ask on the model path,
photo queries, pages, Markdown twins, documents) from 508 callers for `seconds` (default 300). All
the while a writer loop edits a page and runs the content job, adds or removes a photo and runs the
photo job, and appends AI-crawler lines to the access log and runs the ledger job. Every 5 s it
samples the app's RSS, open file descriptors and threads, and the size of site.db-wal. Prints a
Markdown section comparing the end of the run with the state after a warm-up.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from wrkstack import ROOT, free_port, process, python, wrk

sys.path.insert(0, str(ROOT))
from siteapi import demo_photos  # noqa: E402

PATHS = ["/search.json?q=carburetor+jets", "/search.json?q=film+simulation&limit=5",
         "/ask?query=how+do+I+tune+a+carburetor&streaming=false", "/ask?query=what+camera+do+you+use&streaming=false",
         "/photos/query.json?q=night", "/photos/query.json?film=classic", "/images/manifest.json", "/ledger.json",
         "/around/changes.json",
         "/", "/about", "/writing", "/about.md", "/llms.txt", "/openapi.json", "/sitemap.xml", "/robots.txt"]
WARM_UP_S = 30
SAMPLE_S = 5
CRAWLERS = ["Mozilla/5.0 (compatible; GPTBot/1.2; +https://openai.com/gptbot)",
            "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; ClaudeBot/1.0; +claudebot@anthropic.com)"]


def access_line(uri: str, ua: str) -> str:
    """One line as Caddy's JSON access log writes it (the fields the ledger reads)."""
    return json.dumps({"level": "info", "ts": time.time(), "logger": "http.log.access.log0", "msg": "handled request",
                       "request": {"remote_ip": "203.0.113.9", "client_ip": "203.0.113.9", "method": "GET",
                                   "host": "aadhar.sh", "uri": uri, "headers": {"User-Agent": [ua]}},
                       "status": 200, "size": 5120}) + "\n"


def sample(pid: int, wal: Path) -> dict:
    status = Path(f"/proc/{pid}/status").read_text()
    field = dict(line.split(":", 1) for line in status.splitlines())
    field = {key: value.split()[0] for key, value in field.items() if key in ("VmRSS", "Threads")}
    return {"t": time.monotonic(), "rss_mb": int(field["VmRSS"]) / 1024, "threads": int(field["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd")), "wal_mb": wal.stat().st_size / 2**20 if wal.exists() else 0.0}


def app_pid(launcher: subprocess.Popen) -> int:
    """app.py itself, or the python it execs/spawns (the launcher's only child, if any)."""
    children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()
    return int(children[0]) if children else launcher.pid


def writer_loop(tmp: Path, env: dict, stop: threading.Event, runs: list[tuple[str, bool, list[str]]]) -> None:
    page = tmp / "content" / "pages" / "now.md"
    original = page.read_text()
    photos = sorted((tmp / "originals").glob("*.jpg"))
    spare = tmp / "spare.jpg"
    log = tmp / "access.log"
    round_ = 0
    while not stop.is_set():
        round_ += 1
        page.write_text(original + f"\n\nSoak round {round_}.\n")
        if round_ % 2:  # take a photo out of the archive, then put it back the next round
            taken = photos[round_ // 2 % len(photos)]
            shutil.move(taken, spare)
        else:
            shutil.move(spare, taken)
        with log.open("a") as out:
            out.writelines(access_line(f"/about?round={round_}&n={n}", CRAWLERS[n % 2]) for n in range(200))
        for job in ("content", "photos", "ledger"):
            done = subprocess.run([python(), "jobs.py", "run", job], cwd=ROOT, env=env, capture_output=True, text=True)
            runs.append((job, done.returncode == 0, (done.stdout + done.stderr).strip().splitlines()[-1:]))
        stop.wait(2)


def main(seconds: int = 300) -> str:
    tmp = Path(tempfile.mkdtemp())
    shutil.copytree(ROOT / "content", tmp / "content")
    demo_photos.generate(tmp / "originals")
    (tmp / "access.log").touch()
    env = {**os.environ, "SITE_DB_PATH": str(tmp / "site.db"), "SITE_CONTENT_DIR": str(tmp / "content"),
           "SITE_PHOTOS_DIR": str(tmp / "originals"), "SITE_IMAGES_DIR": str(tmp / "public"),
           "SITE_ACCESS_LOG": str(tmp / "access.log"), "SITE_RATE_READ_Q": "100000", "SITE_RATE_ASK_MODEL_Q": "100000"}
    for job in ("content", "photos", "ledger"):
        subprocess.run([python(), "jobs.py", "run", job], cwd=ROOT, env=env, check=True, capture_output=True)
    port = free_port()
    app = f"http://127.0.0.1:{port}"
    wal = tmp / "site.db-wal"
    samples: list[dict] = []
    runs: list[tuple[str, bool, list[str]]] = []
    loads: list[dict] = []
    stop = threading.Event()
    with process([python(), "app.py"], f"{app}/robots.txt", {**env, "SITE_PORT": str(port)}) as launcher:
        pid = app_pid(launcher)
        writer = threading.Thread(target=writer_loop, args=(tmp, env, stop, runs), daemon=True)
        sampler_stop = threading.Event()

        def sampler():
            while not sampler_stop.is_set():
                samples.append(sample(pid, wal))
                sampler_stop.wait(SAMPLE_S)

        watcher = threading.Thread(target=sampler, daemon=True)
        watcher.start()
        writer.start()
        started = time.monotonic()
        while (left := seconds - (time.monotonic() - started)) > 1:
            loads.append(wrk(app, connections=16, seconds=int(min(60, left)), paths=PATHS))
        stop.set()
        writer.join()
        sampler_stop.set()
        watcher.join()
        samples.append(sample(pid, wal))
    shutil.rmtree(tmp, ignore_errors=True)
    warm = next(s for s in samples if s["t"] - samples[0]["t"] >= WARM_UP_S)
    end = samples[-1]
    tail = [s for s in samples if s["t"] >= end["t"] - (end["t"] - warm["t"]) / 3]
    slope = (tail[-1]["rss_mb"] - tail[0]["rss_mb"]) / max((tail[-1]["t"] - tail[0]["t"]) / 60, 1e-9)
    requests_served = sum(load["rps"] for load in loads) / len(loads) * seconds
    failed_jobs = [f"{job}: {' '.join(said)}" for job, ok, said in runs if not ok]
    lines = ["## Soak: the app under traffic while the jobs rewrite site.db", "",
             f"`.venv/bin/python bench/bench_soak.py {seconds}` — wrk (2 threads, 16 connections, 508 callers) over "
             f"{len(PATHS)} read paths (search, /ask on the model path, photo queries, pages, twins, documents) for "
             f"{seconds} s, about {requests_served:,.0f} requests at {requests_served / seconds:.0f}/s, "
             f"{sum(load['errors'] for load in loads)} non-2xx; meanwhile {len(runs)} job runs "
             f"({len(runs) // 3} rounds of content, photos and ledger, each after a change; {len(failed_jobs)} failed). "
             f"Sampled every {SAMPLE_S} s; \"after warm-up\" is the first sample {WARM_UP_S} s in.", "",
             "| measure | after warm-up | end | peak |", "|---|---|---|---|",
             f"| app RSS MB | {warm['rss_mb']:.0f} | {end['rss_mb']:.0f} | {max(s['rss_mb'] for s in samples):.0f} |",
             f"| open file descriptors | {warm['fds']} | {end['fds']} | {max(s['fds'] for s in samples)} |",
             f"| threads | {warm['threads']} | {end['threads']} | {max(s['threads'] for s in samples)} |",
             f"| site.db-wal MB | {warm['wal_mb']:.1f} | {end['wal_mb']:.1f} | {max(s['wal_mb'] for s in samples):.1f} |",
             "", f"- RSS end ÷ after warm-up: **{end['rss_mb'] / warm['rss_mb']:.2f}**; over the last third of the run "
             f"{slope:+.2f} MB a minute", *(f"- failed job run: {failed}" for failed in failed_jobs), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(main(int(sys.argv[1]) if len(sys.argv) > 1 else 300))
