"""`make run`: build site.db on first run, then start the app (waitress), Datasette, the job
scheduler and, when `caddy` is on PATH, Caddy in front of both; print the addresses; Ctrl-C stops
every process it started.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from siteapi import db, demo_photos
from siteapi.config import ROOT, SettingsError, load_settings

DATASETTE_SETTINGS = {
    "base_url": "/data/",
    "sql_time_limit_ms": "1000",
    "max_returned_rows": "1000",
    "allow_download": "off",
    "allow_csv_stream": "off",
    "default_page_size": "50",
}


def datasette_command(db_path: Path, port: int) -> list[str]:
    cmd = [sys.executable, "-m", "datasette", "serve", str(db_path), "--host", "127.0.0.1", "--port", str(port),
           "--metadata", str(ROOT / "metadata.yml"), "--plugins-dir", str(ROOT / "plugins")]
    for key, value in DATASETTE_SETTINGS.items():
        cmd += ["--setting", key, value]
    return cmd


def first_run(settings) -> None:
    """Build what a fresh clone lacks: the demo photo originals, the page index, the photo archive."""
    if not settings.photos_dir.exists() or not any(settings.photos_dir.iterdir()):
        print(f"First run: generating the demo photos in {settings.photos_dir} ...", flush=True)
        demo_photos.generate(settings.photos_dir)
    conn = db.writer(settings.db_path)
    try:
        missing = [table for table in ("pages", "photos")
                   if conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0]
    finally:
        conn.close()
    for table, job in (("pages", "content"), ("photos", "photos")):
        if table in missing:
            print(f"First run: python jobs.py run {job} ...", flush=True)
            subprocess.run([sys.executable, "jobs.py", "run", job], cwd=ROOT, check=False)


def main() -> int:
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"make run: {exc}", file=sys.stderr)
        return 2
    first_run(settings)
    ports = {name: os.environ.get(var, default) for name, var, default in
             (("app", "SITE_PORT", "8000"), ("data", "DATASETTE_PORT", "8001"), ("caddy", "CADDY_PORT", "8080"))}
    env = {**os.environ, "SITE_PORT": ports["app"], "DATASETTE_PORT": ports["data"]}
    commands = {
        "app": [sys.executable, "app.py"],
        "datasette": datasette_command(settings.db_path, int(ports["data"])),
        "jobs": [sys.executable, "jobs.py"],
    }
    caddy = shutil.which("caddy")
    if caddy:
        access_log = Path(settings.access_log or ROOT / "var" / "access.log")
        access_log.parent.mkdir(parents=True, exist_ok=True)
        access_log.touch()  # the ledger job may read before Caddy's first request creates it
        env.update({"SITE_ADDRESS": f":{ports['caddy']}", "CADDY_BIND": os.environ.get("CADDY_BIND", "127.0.0.1"),
                    "SITE_IMAGES_DIR": str(settings.images_dir),
                    "SITE_ORIGINALS_PUBLIC": "true" if settings.originals_public else "false",
                    "SITE_ACCESS_LOG": str(access_log)})
        commands["caddy"] = [caddy, "run", "--config", str(ROOT / "Caddyfile"), "--adapter", "caddyfile"]
    procs = {name: subprocess.Popen(cmd, cwd=ROOT, env=env) for name, cmd in commands.items()}
    print(f"\n  app        http://127.0.0.1:{ports['app']}/", flush=True)
    print(f"  datasette  http://127.0.0.1:{ports['data']}/  (base_url /data/)")
    if caddy:
        print(f"  caddy      http://127.0.0.1:{ports['caddy']}/  (the site, /data/ and /images/ through the edge)")
    else:
        print("  caddy      not on PATH: skipped (apt-get install caddy)")
    print("  jobs       scheduler running; Ctrl-C stops everything\n", flush=True)

    def stop(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        while all(p.poll() is None for p in procs.values()):
            time.sleep(0.5)
        dead = [name for name, p in procs.items() if p.poll() is not None]
        print(f"make run: {', '.join(dead)} stopped; stopping the rest.", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
