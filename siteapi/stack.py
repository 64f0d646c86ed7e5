"""`make run`: build site.db on first run, then start the app (waitress), Datasette, the job
scheduler and, when `caddy` is on PATH, Caddy in front of both; print the addresses; Ctrl-C stops
every process it started, and each of them stops by itself should `make run` be killed outright
(make itself or this process).
It starts nothing while another `make run` serves the same site.db or one of its ports is taken,
and says which.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from siteapi import db, demo_photos, files
from siteapi.config import DATASETTE_PATH, ROOT, SettingsError, load_settings
from siteapi.feeds.coffee import DEMO_CALENDAR

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PARENT = os.getppid()  # at import, the stack's first moment: make's pid, before it could die
PORT_VARIABLES = {"app": "SITE_PORT", "datasette": "DATASETTE_PORT", "caddy": "CADDY_PORT"}
DEFAULT_PORTS = {"datasette": 8001, "caddy": 8080}  # the app's is settings.port (site.toml `port`, default 8000)

DATASETTE_SETTINGS = {
    "base_url": DATASETTE_PATH,
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
    conn = db.writer(settings.db_path)
    try:
        empty = {table for table in ("pages", "photos")
                 if conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0}
    finally:
        conn.close()
    folder = settings.photos_dir
    has_files = folder.exists() and any(folder.iterdir())
    stopped = demo_photos.unfinished(folder)  # the count of a set a first run stopped making
    # An empty folder beside an archive with photos is the owner's, unmounted: no demo set there.
    generate = stopped is not None or (not has_files and "photos" in empty)
    if generate:
        print(f"First run: generating the demo photos in {folder} ...", flush=True)
        demo_photos.generate(folder, stopped or demo_photos.DEFAULT_COUNT)
    elif not has_files:
        print(f"make run: {folder} is empty while the archive has photos (originals not mounted?); "
              f"no demo photos are made there.", flush=True)
    for table, job in (("pages", "content"), ("photos", "photos")):
        if table in empty or (table == "photos" and generate):
            print(f"First run: python jobs.py run {job} ...", flush=True)
            subprocess.run([sys.executable, "jobs.py", "run", job], cwd=ROOT, check=False)


class StackError(Exception):
    """make run cannot start; the message says why in one sentence."""


@contextlib.contextmanager
def sole_stack(db_path: Path):
    """Held while the stack runs: a second `make run` on the same site.db would race the first-run
    build and start a second scheduler. A scheduler already running on it (systemd's site-jobs)
    is found here too, before anything starts, rather than by the stack's own scheduler later."""
    lock = files.try_lock(files.lock_path(db_path, "stack"))
    if lock is None:
        raise StackError(f"Another `make run` is already serving {db_path}; stop it first (Ctrl-C where it runs).")
    with lock:
        scheduler = files.try_lock(files.lock_path(db_path, "scheduler"))
        if scheduler is None:
            raise StackError(f"A job scheduler already runs on {db_path} (systemd's site-jobs.service, or "
                             "`python jobs.py`); stop it first.")
        scheduler.close()  # for the stack's own scheduler to take
        yield


def port_problem(port: int) -> str | None:
    with socket.socket() as probe:
        # A connection closed moments ago (TIME_WAIT) is no listener; with SO_REUSEADDR only a
        # listener refuses the bind, even one that shares its port through SO_REUSEPORT as Caddy's do.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            return "is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be opened ({exc.strerror})"
    return None


def env_port(name: str) -> int:
    variable = PORT_VARIABLES[name]
    raw = os.environ.get(variable, str(DEFAULT_PORTS[name]))
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise StackError(f"{variable} must be a TCP port from 1 to 65535, not {raw!r}.")
    return int(raw)


def free_ports(settings, with_caddy: bool) -> dict[str, int]:
    """The stack's ports, each checked free first: a second Caddy would share a taken one silently."""
    ports = {"app": settings.port, "datasette": env_port("datasette")}
    if with_caddy:
        ports["caddy"] = env_port("caddy")
    if len(set(ports.values())) < len(ports):
        named = ", ".join(f"{PORT_VARIABLES[name]}={port}" for name, port in ports.items())
        raise StackError(f"The ports must differ: {named}.")
    for name, port in ports.items():
        if problem := port_problem(port):
            raise StackError(f"Port {port} ({PORT_VARIABLES[name]}, for {name}) {problem} on 127.0.0.1; stop what "
                             f"holds it (another `make run`?) or set {PORT_VARIABLES[name]} to a free port.")
    return ports


def commands_and_env(settings, ports: dict[str, int], caddy: str | None) -> tuple[dict, dict]:
    """Each process's command, and the environment they share. Without the owner's calendar the
    coffee slots come from a demo week; without Caddy there is no access log, so the ledger is not
    configured (a 503 that says so, not a 502 promising a read that never comes)."""
    env = {**os.environ, "SITE_PORT": str(ports["app"]), "DATASETTE_PORT": str(ports["datasette"])}
    if not env.get("SITE_CALENDAR_ICS_URL", "").strip():  # empty is unset, as the calendar job reads it
        env["SITE_CALENDAR_ICS_URL"] = DEMO_CALENDAR.as_uri()
    if not caddy:
        env.setdefault("SITE_ACCESS_LOG", "")
    commands = {
        "app": [sys.executable, "app.py"],
        "datasette": datasette_command(settings.db_path, ports["datasette"]),
        "jobs": [sys.executable, "jobs.py"],
    }
    if caddy:
        access_log = Path(settings.access_log or ROOT / "var" / "access.log")
        access_log.parent.mkdir(parents=True, exist_ok=True)
        # The ledger job may read before Caddy's first request creates it; made here, it is the
        # user's alone, as in production (0640, group site): it holds callers' addresses and headers.
        access_log.touch(mode=0o600)
        env.update({"SITE_ADDRESS": f":{ports['caddy']}", "CADDY_BIND": os.environ.get("CADDY_BIND", "127.0.0.1"),
                    # No admin endpoint: on its default localhost:2019 it would share the port with any
                    # other Caddy there (Debian's own caddy.service), whose reloads could land on this one.
                    "CADDY_ADMIN": os.environ.get("CADDY_ADMIN", "off"),
                    "SITE_IMAGES_DIR": str(settings.images_dir),
                    "SITE_ORIGINALS_PUBLIC": "true" if settings.originals_public else "false",
                    "SITE_ACCESS_LOG": str(access_log),
                    # Caddy's autosaved config and its data beside the access log, not in the user's home.
                    "XDG_CONFIG_HOME": str(access_log.parent / "caddy"), "XDG_DATA_HOME": str(access_log.parent / "caddy")})
        commands["caddy"] = [caddy, "run", "--config", str(ROOT / "Caddyfile"), "--adapter", "caddyfile"]
    return commands, env


def stop_with_parent(parent: int):
    """A child's preexec_fn, and the stack's own first step: SIGTERM the process when its parent
    (this stack; for the stack, make) dies, even by SIGKILL, which no handler can catch (Linux's
    PR_SET_PDEATHSIG, kept across exec). Set after the fork, so a parent that died in between has
    already left the process to another parent: then it does not start."""
    def arm():
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(1)
    return arm


def wait_until_listening(ports: dict[str, int], procs: dict[str, subprocess.Popen], timeout: float = 60) -> None:
    """Until every port accepts a connection, so that the addresses printed next answer; or until a
    process stops (watch says which) or `timeout` passes."""
    waiting, deadline = set(ports.values()), time.monotonic() + timeout
    while waiting and time.monotonic() < deadline and all(p.poll() is None for p in procs.values()):
        for port in list(waiting):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                waiting.discard(port)
        time.sleep(0.1)


def print_addresses(ports: dict[str, int], env: dict[str, str]) -> None:
    print(f"\n  app        http://127.0.0.1:{ports['app']}/", flush=True)
    print(f"  datasette  http://127.0.0.1:{ports['datasette']}/  (base_url {DATASETTE_PATH})")
    if "caddy" in ports:
        print(f"  caddy      http://127.0.0.1:{ports['caddy']}/  (the site, /data/ and /images/ through the edge)")
    else:
        print("  caddy      not on PATH: skipped (apt-get install caddy); without its access log the crawler "
              "ledger is not configured")
    if env["SITE_CALENDAR_ICS_URL"] == DEMO_CALENDAR.as_uri():
        print("  coffee     slots from a demo week (siteapi/demo_calendar.ics); SITE_CALENDAR_ICS_URL names a real calendar")
    print("  jobs       scheduler running; Ctrl-C stops everything\n", flush=True)


def watch(procs: dict[str, subprocess.Popen], restart: Callable[[str], subprocess.Popen]) -> int:
    """Until Ctrl-C or SIGTERM (0) or until one process stops (1). Datasette exits with 75
    (EX_TEMPFAIL) when site.db is a new file it should serve (plugins/follow_rebuild.py): it is
    started again (`restart`), as systemd does."""
    try:
        while True:
            time.sleep(0.5)
            status = {name: p.poll() for name, p in procs.items()}  # once each: a process may end meanwhile
            if status["datasette"] == os.EX_TEMPFAIL:
                print("make run: Datasette starts again on the new site.db.", flush=True)
                procs["datasette"] = restart("datasette")
            elif any(code is not None for code in status.values()):
                break
    except KeyboardInterrupt:
        return 0
    dead = [name for name, p in procs.items() if p.poll() is not None]
    print(f"make run: {', '.join(dead)} stopped; stopping the rest.", file=sys.stderr)
    return 1


def stop(procs: dict[str, subprocess.Popen]) -> None:
    for p in procs.values():
        if p.poll() is None:
            p.terminate()
    for p in procs.values():
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def start() -> int:
    settings = load_settings()
    caddy = shutil.which("caddy")
    with sole_stack(settings.db_path):
        ports = free_ports(settings, bool(caddy))
        first_run(settings)
        commands, env = commands_and_env(settings, ports, caddy)
        procs: dict[str, subprocess.Popen] = {}

        def launch(name: str) -> subprocess.Popen:
            return subprocess.Popen(commands[name], cwd=ROOT, env=env, preexec_fn=stop_with_parent(os.getpid()))

        try:
            for name in commands:
                procs[name] = launch(name)
            wait_until_listening(ports, procs)
            if all(p.poll() is None for p in procs.values()):  # else watch says which stopped
                print_addresses(ports, env)
            return watch(procs, launch)
        finally:
            stop(procs)


def interrupt(*_):
    raise KeyboardInterrupt


def main() -> int:
    # Set before anything starts, so that no signal leaves a child behind; SIGINT too, which a shell
    # ignores in a job it puts in the background.
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
    stop_with_parent(PARENT)()  # make killed outright: SIGTERM, so the stack stops what it started
    try:
        return start()
    except SettingsError as exc:
        print(f"make run: {exc}", file=sys.stderr)
        return 2
    except StackError as exc:
        print(f"make run: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
