"""End to end, as `make run` starts it: the app in waitress, Datasette and the job scheduler, with
real Caddy in front; and the project's Caddyfile in front of a slow event stream of the tests' own.
Every JSON answer of the app through the edge is validated against /openapi.json. Skipped only where
`caddy` is not installed (CI installs it)."""
import contextlib
import dataclasses
import http.client
import io
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from typing import Callable
from urllib.parse import urlsplit

import exiv2
import httpx
import numpy as np
import pytest
import requests
from httpx_sse import connect_sse
from PIL import Image

import jobs
from app import make_app
from conftest import ROOT, Client
from feeds_servers import USER_AGENTS, feeds_settings
from servers import accepts, open_stream, read_until, running, serve_wsgi
from siteapi import db, demo_photos, files, ingest, photos
from siteapi.stack import commands_and_env, datasette_command, watch
from siteapi.feeds.coffee import DEMO_CALENDAR
from siteapi.feeds.ledger import ledger, run_ledger

CADDY = shutil.which("caddy")
needs_caddy = pytest.mark.skipif(CADDY is None and not os.environ.get("CI"), reason="caddy is not installed")


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` loopback ports free now and distinct from each other: the sockets are held together
    while the kernel picks, since ports picked one after another can repeat (each is free again once
    its probe socket closes)."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


def wait_for(url: str, timeout: float = 60) -> requests.Response:
    deadline = time.monotonic() + timeout
    while True:
        try:
            r = requests.get(url, timeout=5)
            if r.status_code < 500:
                return r
        except requests.ConnectionError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not come up")
        time.sleep(0.3)


@needs_caddy
def test_caddyfile_validates():
    out = subprocess.run([CADDY, "validate", "--config", str(ROOT / "Caddyfile"), "--adapter", "caddyfile"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Valid configuration" in out.stdout + out.stderr


def stack_env(tmp, ports: dict[str, int]) -> dict[str, str]:
    """The environment of a `make run` (`python -m siteapi.stack`) of the tests' own, its files in `tmp`."""
    # The project's settings, with the census and the venture-firm crawl pointed at names that never
    # resolve (RFC 2606 .invalid): the scheduler runs both at start and they must not reach the internet.
    (tmp / "site.toml").write_text(re.sub(r"(?ms)^around_roster = \[.*?^\]", 'around_roster = [{ name = "Nowhere", '
                                          'url = "https://around.invalid/" }]', (ROOT / "site.toml").read_text()))
    # Without the outside services' secrets a developer's shell may hold: the scheduler would call them.
    inherited = {k: v for k, v in os.environ.items()
                 if k not in ("SITE_SPOTIFY_CLIENT_ID", "SITE_SPOTIFY_CLIENT_SECRET", "SITE_CALENDAR_ICS_URL")}
    return {**inherited, **{k: str(v) for k, v in ports.items()},
            "SITE_CONFIG": str(tmp / "site.toml"), "SITE_CONTENT_DIR": str(ROOT / "content"),
            "SITE_LENS_CENSUS_ROSTER": "https://census.invalid/",
            "SITE_DB_PATH": str(tmp / "site.db"), "SITE_ACCESS_LOG": str(tmp / "access.log"),
            "SITE_PHOTOS_DIR": str(tmp / "originals"), "SITE_IMAGES_DIR": str(tmp / "images"),
            "XDG_DATA_HOME": str(tmp / "xdg-data"), "XDG_CONFIG_HOME": str(tmp / "xdg-config"), "HOME": str(tmp),
            # The /ask embedding deadline out of reach: on a busy machine a stall past its 250 ms would
            # turn the model's answer test_ask_through_caddy expects into a lexical one.
            "SITE_ASK_DEADLINE_MS": "60000"}


def stack_ports() -> dict[str, int]:
    return dict(zip(("SITE_PORT", "DATASETTE_PORT", "CADDY_PORT"), free_ports(3)))


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stack")
    ports = stack_ports()
    env = stack_env(tmp, ports)
    (tmp / "images").mkdir()
    (tmp / "images" / "probe.jpg").write_text("static file\n")
    (tmp / "images" / "caption.txt").write_text("not an image\n")
    # A file, not a pipe: nothing reads the output while the tests run, and a full pipe would block
    # every process of the stack that writes a log line. SIGINT ignored, as a shell starts a job in
    # the background (`make run &` in a script, a CI step): Ctrl-C must stop the stack all the same.
    with open(tmp / "stack.log", "w") as log:
        proc = subprocess.Popen(["sh", "-c", 'trap "" INT; exec "$0" -m siteapi.stack', sys.executable], cwd=ROOT,
                                env=env, stdout=log, stderr=subprocess.STDOUT)
        edge = f"http://127.0.0.1:{ports['CADDY_PORT']}"
        try:
            wait_for(edge + "/robots.txt", timeout=120)
            wait_for(edge + "/data/", timeout=60)
            yield {"edge": edge, "tmp": tmp, "proc": proc, "env": env, **ports}
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                for pid in children(proc.pid):  # what the stack failed to stop
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                proc.kill()
            print((tmp / "stack.log").read_text())


def stack_until_it_exits(env: dict[str, str]) -> tuple[int, str]:
    """Run a stack expected to refuse to start: its exit status and output."""
    proc = subprocess.Popen([sys.executable, "-m", "siteapi.stack"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # it started after all: let it stop what it started
        out, _ = proc.communicate(timeout=30)
        raise AssertionError(f"the stack started:\n{out}") from None
    return proc.returncode, out


@pytest.fixture(scope="module")
def edge(stack, checker):
    """requests through Caddy to the app, each JSON answer validated against /openapi.json."""
    return Client(stack["edge"], checker)


def listening_sockets() -> list[tuple[str, int, str]]:
    """(local address in hex as /proc/net shows it, port, socket inode) of every listening TCP socket."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                address, hex_port = fields[1].rsplit(":", 1)
                if fields[3] == "0A":  # LISTEN
                    found.append((address, int(hex_port, 16), fields[9]))
    return found


def listening_addresses(port: int) -> set[str]:
    return {address for address, listening, _ in listening_sockets() if listening == port}


def children(pid: int) -> list[int]:
    return [int(child) for child in open(f"/proc/{pid}/task/{pid}/children").read().split()]


def listening_ports(pids: list[int]) -> set[int]:
    """The TCP ports the processes `pids` listen on."""
    inodes = set()
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):  # an fd closed since the listing
                inodes.add(os.readlink(f"/proc/{pid}/fd/{fd}").removeprefix("socket:[").rstrip("]"))
    return {port for _, port, inode in listening_sockets() if inode in inodes}


@needs_caddy
def test_every_server_listens_on_loopback_only(stack):
    ports = {stack[name] for name in ("CADDY_PORT", "SITE_PORT", "DATASETTE_PORT")}
    assert listening_ports(children(stack["proc"].pid)) == ports  # and on no other port: no Caddy admin endpoint
    for port in ports:
        # 127.0.0.1 as /proc/net/tcp writes it (little-endian hex)
        assert listening_addresses(port) == {"0100007F"}, port



def running_pid(pid: int) -> bool:
    """The process exists and has not exited (an orphan's zombie waits for a reaper that may never come)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def killed_outright(stack, tmp_path, argv: list[str], started_by: Callable[[int], list[int]]) -> tuple[list[int], list[int]]:
    """Run `argv` (a stack, or a stand-in for make running one) on a copy of the stack's site.db until
    it serves, SIGKILL it, and give the pids `started_by` its pid found, and those still running a
    minute later (a guard against a process that never stops; nothing is timed), killed then."""
    with contextlib.closing(sqlite3.connect(stack["tmp"] / "site.db")) as built, \
            contextlib.closing(sqlite3.connect(tmp_path / "site.db")) as copy:
        built.backup(copy)  # a built site.db: the first-run build is not what this is about
    ports = stack_ports()
    proc = subprocess.Popen(argv, cwd=ROOT, env=stack_env(tmp_path, ports), stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    try:
        wait_for(f"http://127.0.0.1:{ports['CADDY_PORT']}/robots.txt", timeout=120)
        started = started_by(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 60
    while any(map(running_pid, started)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [pid for pid in started if running_pid(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return started, left


@needs_caddy
def test_a_killed_make_run_leaves_no_process_behind(stack, tmp_path):
    """SIGKILL reaches no handler of `make run`, so its children notice their parent's death themselves."""
    started, left = killed_outright(stack, tmp_path, [sys.executable, "-m", "siteapi.stack"], children)
    assert len(started) == 4 and not left  # the app, Datasette, the scheduler and Caddy
    # Caddy kept its autosaved config beside the access log, not under the user's configuration folder
    assert (tmp_path / "caddy" / "caddy" / "autosave.json").exists() and not (tmp_path / "xdg-config" / "caddy").exists()


@needs_caddy
def test_a_killed_make_leaves_no_process_behind(stack, tmp_path):
    """make itself killed outright (soak_audit25): the stack, make's child, had run on with every port
    and lock held, so the next `make run` refused to start. A shell stands in for make."""
    def the_stack_and_its_children(make: int) -> list[int]:
        (stack_pid,) = children(make)
        return [stack_pid, *children(stack_pid)]

    started, left = killed_outright(stack, tmp_path, ["sh", "-c", '"$0" -m siteapi.stack; :', sys.executable],
                                    the_stack_and_its_children)
    assert len(started) == 5 and not left  # the stack, then the app, Datasette, the scheduler and Caddy


@needs_caddy
def test_a_second_make_run_on_the_same_site_db_starts_nothing(stack):
    """On ports of its own, so only the first stack's hold on site.db can stop it: it would race the
    first's build and run a second scheduler."""
    status, out = stack_until_it_exits({**stack["env"], **{k: str(v) for k, v in stack_ports().items()}})
    assert status == 1 and "Traceback" not in out, out
    assert f"make run: Another `make run` is already serving {stack['tmp'] / 'site.db'};" in out, out
    assert requests.get(stack["edge"] + "/robots.txt", timeout=30).status_code == 200


def test_datasette_starts_again_on_a_rebuilt_site_db(tmp_path):
    """Datasette reads the file it opened for its life, a deleted one too: make run starts it again
    once site.db is a new file it may serve (it exits for that: plugins/follow_rebuild.py), so
    /data/ shows what the app shows."""
    content = tmp_path / "content"
    shutil.copytree(ROOT / "content", content)
    ports = stack_ports()
    env = {**stack_env(tmp_path, ports), "SITE_CONTENT_DIR": str(content)}
    datasette = f"http://127.0.0.1:{ports['DATASETTE_PORT']}/data/site.json"
    marker = {"sql": "select count(*) from pages where title = 'Datasette marker'", "_shape": "arrayfirst"}
    with open(tmp_path / "stack.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "siteapi.stack"], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            wait_for(datasette, timeout=120)
            assert requests.get(datasette, params=marker, timeout=30).json() == [0]
            (content / "pages" / "marker.md").write_text(
                "---\ntitle: Datasette marker\nkind: page\npath: /datasette-marker\n---\nA page of the new file.\n")
            (tmp_path / "site.db").unlink()
            for job in ("content", "photos"):  # the old file had photos: the new one is served with its own
                deadline = time.monotonic() + 120
                # the scheduler, which runs every job on a rebuilt file, may hold the job: 75 until it is done
                while (rebuilt := subprocess.run([sys.executable, "jobs.py", "run", job], cwd=ROOT, env=env,
                                                 capture_output=True, text=True, timeout=120)).returncode == 75:
                    assert time.monotonic() < deadline, rebuilt.stdout + rebuilt.stderr
                    time.sleep(0.5)
                assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
            # Until it exits, a Datasette thread that had not opened site.db yet may read the new file
            # already: the restart is what is waited for, then the new file from every thread.
            deadline = time.monotonic() + 60
            while "make run: Datasette starts again on the new site.db." not in (tmp_path / "stack.log").read_text():
                assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "stack.log").read_text()
                time.sleep(0.2)
            wait_for(datasette)
            assert all(requests.get(datasette, params=marker, timeout=30).json() == [1] for _ in range(6))
            assert proc.poll() is None
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)


def test_make_run_without_caddy_or_calendar_offers_a_demo_week_and_says_the_ledger_is_not_configured(tmp_path):
    """Caddy not on PATH, no calendar of the owner's: the coffee slots come from the demo week, the
    ledger (no access log without Caddy) answers that it is not configured rather than promising a
    read, and the addresses are printed once they answer."""
    (tmp_path / "empty").mkdir()
    ports = stack_ports()
    env = {**stack_env(tmp_path, ports), "PATH": str(tmp_path / "empty")}
    del env["SITE_ACCESS_LOG"]
    app, log_path = f"http://127.0.0.1:{ports['SITE_PORT']}", tmp_path / "stack.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "siteapi.stack"], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while f"  app        {app}/" not in log_path.read_text():
                assert time.monotonic() < deadline and proc.poll() is None, log_path.read_text()
                time.sleep(0.05)
            assert requests.get(app + "/robots.txt", timeout=10).status_code == 200  # no connection refused
            printed = log_path.read_text()
            assert "caddy      not on PATH" in printed and "ledger is not configured" in printed, printed
            assert "slots from a demo week" in printed, printed
            ledger = requests.get(app + "/ledger.json", timeout=10)
            assert ledger.status_code == 503 and ledger.json()["code"] == "not_configured", ledger.text
            deadline = time.monotonic() + 60  # the calendar job runs at start
            while (coffee := requests.get(app + "/coffee/availability.json", timeout=10)).status_code == 503:
                assert time.monotonic() < deadline, coffee.text
                time.sleep(0.5)
            assert coffee.status_code == 200 and coffee.json()["available"] and coffee.json()["slots"], coffee.text
            assert "job ledger failed" not in log_path.read_text() and "job calendar failed" not in log_path.read_text()
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)


def test_make_runs_environment_fills_in_only_what_the_owner_left_unset(tmp_path, monkeypatch):
    """The demo week stands in for a calendar unset or set empty, never for the owner's; the ledger
    is unconfigured without Caddy unless an access log is named."""
    settings = feeds_settings(tmp_path)
    ports = {"app": 1, "datasette": 2, "caddy": 3}
    for unset in (None, "", "  "):
        if unset is None:
            monkeypatch.delenv("SITE_CALENDAR_ICS_URL", raising=False)
        else:
            monkeypatch.setenv("SITE_CALENDAR_ICS_URL", unset)
        monkeypatch.delenv("SITE_ACCESS_LOG", raising=False)
        _, env = commands_and_env(settings, ports, None)
        assert env["SITE_CALENDAR_ICS_URL"] == DEMO_CALENDAR.as_uri() and env["SITE_ACCESS_LOG"] == ""
    monkeypatch.setenv("SITE_CALENDAR_ICS_URL", "https://calendar.example/owner.ics")
    monkeypatch.setenv("SITE_ACCESS_LOG", "/var/log/other.log")
    _, env = commands_and_env(settings, ports, None)
    assert env["SITE_CALENDAR_ICS_URL"] == "https://calendar.example/owner.ics"
    assert env["SITE_ACCESS_LOG"] == "/var/log/other.log"


def test_make_run_prints_no_addresses_when_a_process_stops_before_they_answer(tmp_path):
    """A Caddy that exits at once: make run says it stopped and stops the rest, without first
    printing addresses that do not answer."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "caddy").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "bin" / "caddy").chmod(0o755)
    env = {**stack_env(tmp_path, stack_ports()), "PATH": str(tmp_path / "bin")}
    code, out = stack_until_it_exits(env)
    assert code == 1 and "caddy stopped; stopping the rest" in out, out
    assert "  app        http://" not in out and "Ctrl-C stops everything" not in out, out


def test_datasette_as_systemd_runs_it_exits_to_be_started_on_a_rebuilt_site_db(tmp_path):
    """Under systemd no `make run` watches site.db: Datasette itself exits with 75, which
    `Restart=on-failure` restarts, once the rebuilt file may stand in for the one it opened (its
    pages, and its photos or an ended photos run, since the old file had photos)."""
    env = stack_env(tmp_path, stack_ports())
    demo_photos.generate(tmp_path / "originals", count=2)

    def job(name: str) -> None:
        done = subprocess.run([sys.executable, "jobs.py", "run", name], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr

    job("content")
    # A writer that stays (the scheduler holds site.db open): the photos stay in the old file's WAL,
    # which SQLite finds by name, so a connection reading the old file for the first time after the
    # rebuild would read the new file's WAL and find no photos there.
    scheduler = db.writer(tmp_path / "site.db")
    scheduler.execute("PRAGMA wal_autocheckpoint=0")
    job("photos")
    port, log = free_port(), tmp_path / "datasette.log"
    unit = (ROOT / "deploy" / "site-datasette.service").read_text()
    assert "\nRestart=on-failure\n" in unit and "--plugins-dir plugins" in unit
    with log.open("w") as out:
        proc = subprocess.Popen(datasette_command(tmp_path / "site.db", port), cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        wait_for(f"http://127.0.0.1:{port}/data/site/photos.json")
        (tmp_path / "site.db").unlink()
        job("content")  # a new file with its pages, no photos yet: not served in place of the old one
        deadline = time.monotonic() + 60
        while "with its pages but no photos yet" not in log.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.2)
        assert proc.poll() is None
        job("photos")
        assert proc.wait(timeout=60) == os.EX_TEMPFAIL, log.read_text()
    finally:
        scheduler.close()
        if proc.poll() is None:
            proc.kill()
    assert f"datasette: {tmp_path / 'site.db'} is a new file; exiting with status 75" in log.read_text()
    assert "Traceback" not in log.read_text()


def test_datasette_whose_site_db_is_gone_by_its_startup_exits_75_to_be_started_again(tmp_path):
    """site.db deleted between Datasette's check of its arguments and the plugins' startup (systemd
    restarts it while the jobs rebuild): it leaves with 75, not serving a file it cannot follow."""
    script = f"""
import importlib.util, sys
sys.path.insert(0, {str(ROOT)!r})
spec = importlib.util.spec_from_file_location("follow_rebuild", {str(ROOT / "plugins" / "follow_rebuild.py")!r})
plugin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plugin)
class Database:
    path = {str(tmp_path / "gone" / "site.db")!r}
class Datasette:
    databases = {{"site": Database()}}
plugin.startup(Datasette())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == os.EX_TEMPFAIL, done.stdout + done.stderr
    assert "cannot open" in done.stderr and "Traceback" not in done.stderr


def test_make_run_restarts_a_datasette_that_exits_75_between_two_looks(monkeypatch):
    """`watch` looks at each process once a round: Datasette ending with 75 just after it was seen
    running is started again, not taken for a crash that stops the stack."""
    monkeypatch.setattr("siteapi.stack.time.sleep", lambda seconds: None)

    class Process:
        def __init__(self, *statuses):
            self.statuses = list(statuses)

        def poll(self):
            status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
            if isinstance(status, type) and issubclass(status, BaseException):
                raise status  # Ctrl-C, to end the test's watch
            return status

    started = []

    def restart(name):
        started.append(name)
        return Process(None, KeyboardInterrupt)

    procs = {"app": Process(None), "datasette": Process(None, os.EX_TEMPFAIL), "jobs": Process(None)}
    assert watch(procs, restart) == 0 and started == ["datasette"]


def test_a_scheduler_already_running_on_the_site_db_starts_nothing(tmp_path):
    """systemd's site-jobs.service (or `python jobs.py`) holds the scheduler's lock: make run says so
    before it builds or starts anything, not after printing its addresses."""
    env = stack_env(tmp_path, stack_ports())
    held = files.try_lock(files.lock_path(tmp_path / "site.db", "scheduler"))
    try:
        status, out = stack_until_it_exits(env)
    finally:
        held.close()
    assert status == 1 and "Traceback" not in out, out
    assert f"make run: A job scheduler already runs on {tmp_path / 'site.db'}" in out and "scheduler running" not in out
    assert not (tmp_path / "site.db").exists() and not (tmp_path / "originals").exists()


@pytest.mark.parametrize("variable", ["SITE_PORT", "DATASETTE_PORT", pytest.param("CADDY_PORT", marks=needs_caddy)])
def test_a_taken_port_is_named_and_nothing_starts(tmp_path, variable):
    """A port held by a listener that shares it (SO_REUSEPORT, as Caddy's listeners do): a second
    Caddy would share it too, silently; make run says which port and builds and starts nothing."""
    ports = stack_ports()
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        taken.bind(("127.0.0.1", ports[variable]))
        taken.listen()
        status, out = stack_until_it_exits(stack_env(tmp_path, ports))
    assert status == 1 and "Traceback" not in out, out
    assert f"Port {ports[variable]} ({variable}, " in out and "is already in use" in out, out
    assert not (tmp_path / "site.db").exists() and not (tmp_path / "originals").exists()


@needs_caddy
def test_api_through_caddy(edge):
    r = edge.get("/search.json?q=carburetor", headers={"Accept-Encoding": "gzip"})
    assert r.status_code == 200 and r.json()["results"]
    assert r.headers["RateLimit-Policy"].startswith('"read"')
    assert r.headers.get("Content-Encoding") in ("gzip", "zstd")


@needs_caddy
def test_a_body_over_the_apps_cap_gets_the_apps_413_at_the_edge(stack):
    """The edge reads bodies whole before asking the app; one as large as waitress refuses gets the
    same JSON 413 there, every time (passed on, Caddy 2.6 answered 502 as often as not), with a
    Content-Length or chunked without one (review23b #2); one just under reaches the app, and so
    does a Content-Length written with leading zeros (review23b #4)."""
    app = f"http://127.0.0.1:{stack['SITE_PORT']}"
    direct = requests.post(app + "/ask", data=b"x" * (3 << 20), headers={"Content-Type": "application/json"}, timeout=30)
    assert direct.status_code == 413 and direct.json()["code"] == "body_too_large"
    assert "over 512 KB" in direct.json()["error"]

    def chunks(size: int):
        for start in range(0, size, 65536):
            yield b"x" * min(65536, size - start)

    for body in (b"x" * (3 << 20), b"x" * (512 << 10), b"x" * (50 << 20), chunks(600_000), chunks(50 << 20)):
        edge = requests.post(stack["edge"] + "/ask", data=body, headers={"Content-Type": "application/json"}, timeout=60)
        assert (edge.status_code, edge.json()) == (413, direct.json()), (edge.status_code, edge.text[:200])
        assert edge.headers["Cache-Control"] == "no-store" and edge.headers["Access-Control-Allow-Origin"] == "*"
    under = requests.post(stack["edge"] + "/ask", data=b"x" * ((512 << 10) - 1), headers={"Content-Type": "application/json"},
                          timeout=60)
    assert under.status_code == 400 and under.json()["parameter"] == "body"  # the app's own answer: over 64 KB
    with socket.create_connection(("127.0.0.1", stack["CADDY_PORT"]), timeout=30) as sock:
        sock.sendall(b'POST /ask HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 000000020\r\n'
                     b'Connection: close\r\n\r\n{"query": "carbs!!"}')
        answer = read_until(sock, b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]  # read as 20 bytes, not as a number of nine digits




@needs_caddy
def test_the_edges_413_is_its_own_not_the_apps(tmp_path):
    """The caps above are Caddy's own: behind it here an upstream that takes any body (no 512 KiB cap
    of waitress's) and answers 200, so a 413 for exactly 512 KiB with a Content-Length, and for
    600,000 bytes chunked, can only come from the edge, and no such body reaches the upstream's
    app; a byte under the cap, with a Content-Length or chunked, reaches it whole. (With nothing
    listening upstream, the chunked body is a 502: Caddy holds 512 KiB, then dials the app before
    it reads on and finds the body too large.)"""
    received = []

    def take_any_body(environ, start_response):
        received.append(len(environ["wsgi.input"].read()))
        return plain_ok(environ, start_response)

    def chunks(size: int):
        for start in range(0, size, 65536):
            yield b"x" * min(65536, size - start)

    with serve_wsgi(take_any_body, max_request_body_size=64 << 20) as base, \
            caddy_in_front(int(base.rsplit(":", 1)[1]), tmp_path) as port:
        edge = f"http://127.0.0.1:{port}/ask"
        for name, body in (("Content-Length: 524288", b"x" * (512 << 10)), ("chunked 600,000", chunks(600_000)),
                           ("Content-Length: 5 MiB", b"x" * (5 << 20)), ("chunked 5 MiB", chunks(5 << 20))):
            r = requests.post(edge, data=body, headers={"Content-Type": "application/json"}, timeout=60)
            assert r.status_code == 413 and r.json()["code"] == "body_too_large", (name, r.status_code, r.text[:200])
            assert received == [], name  # the upstream's app never saw it
        for name, body, size in (("Content-Length: 524287", b"x" * ((512 << 10) - 1), (512 << 10) - 1),
                                 ("chunked 500,000", chunks(500_000), 500_000)):
            r = requests.post(edge, data=body, headers={"Content-Type": "application/json"}, timeout=60)
            assert (r.status_code, r.text) == (200, "ok"), (name, r.status_code, r.text[:200])
            assert received.pop() == size, name

@needs_caddy
def test_caller_is_the_client_behind_caddy(stack):
    # Caddy sets X-Forwarded-For to the real client; a spoofed header from the client is replaced.
    budget = [requests.get(stack["edge"] + "/robots.txt", headers={"X-Forwarded-For": f"192.0.2.{i}"},
                           timeout=30).headers["RateLimit"] for i in range(3)]
    remaining = [int(v.split("r=")[1].split(";")[0]) for v in budget]
    assert remaining[0] > remaining[1] > remaining[2]


@needs_caddy
def test_datasette_under_data(stack):
    r = requests.get(stack["edge"] + "/data/site/pages.json?_shape=array&_size=5", timeout=30)
    assert r.status_code == 200 and len(r.json()) == 5 and "path" in r.json()[0]
    page = requests.get(stack["edge"] + "/data/site/pages", timeout=30).text
    assert 'href="/data/site/pages' in page  # links carry the /data/ prefix
    hidden = requests.get(stack["edge"] + "/data/site", timeout=30).text
    assert "job_runs" not in hidden.split("hidden tables")[0]
    canned = requests.get(stack["edge"] + "/data/site/writing_by_year.json?_shape=array", timeout=30).json()
    assert canned and {"year", "posts"} <= set(canned[0])
    sql = stack["edge"] + "/data/site.json"
    write = requests.get(sql, params={"sql": "delete from pages"}, timeout=30)
    assert write.status_code == 400 and "SELECT" in write.text  # only read-only statements run
    assert requests.get(sql, params={"sql": "select count(*) as n from pages", "_shape": "array"},
                        timeout=30).json()[0]["n"] > 40  # and the rows are all still there
    rows = requests.get(sql, params={"sql": "with recursive n(i) as (select 1 union all select i + 1 from n "
                                            "where i < 5000) select i from n", "_shape": "objects"}, timeout=30).json()
    assert len(rows["rows"]) == 1000 and rows["truncated"] is True  # max_returned_rows
    slow = requests.get(sql, params={"sql": "with recursive n(i) as (select 1 union all select i + 1 from n) "
                                           "select count(*) from n"}, timeout=30)
    assert slow.status_code == 400 and "interrupted" in slow.text.lower()  # sql_time_limit_ms
    assert requests.get(stack["edge"] + "/data/site.db", timeout=30).status_code in (403, 404)


@needs_caddy
def test_datasette_answers_carry_the_data_budget(stack):
    """make run's Datasette spends the caller's `data` budget (plugins/rate_limit.py) under the
    stack's settings, whose data_q tests/conftest.py raises (test_datasette_rate.py spends one out)."""
    r = requests.get(stack["edge"] + "/data/site/pages.json?_size=1", timeout=30)
    assert r.status_code == 200
    assert r.headers["RateLimit-Policy"] == f'"data";q={stack["env"]["SITE_RATE_DATA_Q"]};w=60'


@needs_caddy
def test_private_tables_are_unreadable_even_by_sql(stack):
    sql = stack["edge"] + "/data/site.json"
    assert requests.get(sql, params={"sql": "select count(*) as n from job_runs", "_shape": "array"},
                        timeout=30).json()[0]["n"] >= 2  # the first run's content and photos jobs
    for query in ("select * from job_runs", "select error from job_runs where ok = 0",
                  "select count(*) from pages where exists (select 1 from job_runs where error like '%')",
                  "select start_utc, end_utc from coffee_busy"):
        refused = requests.get(sql, params={"sql": query}, timeout=30)
        assert refused.status_code == 400 and "prohibited" in refused.json()["error"], query
    for table in ("job_runs", "coffee_busy"):
        assert requests.get(f"{stack['edge']}/data/site/{table}.json", timeout=30).status_code == 403


@needs_caddy
def test_images_are_static_with_a_long_cache(stack):
    r = requests.get(stack["edge"] + "/images/probe.jpg", timeout=30)
    assert r.status_code == 200 and r.text == "static file\n"
    assert "immutable" in r.headers["Cache-Control"]
    assert r.headers["Access-Control-Expose-Headers"] == "ETag, Accept-Ranges"  # a script may revalidate or resume it
    other = requests.get(stack["edge"] + "/images/caption.txt", headers={"Accept": "application/json"}, timeout=30)
    assert other.status_code == 404 and other.json()["code"] == "not_found"  # image types only, at the edge too
    for version, status in (("1", 200), ("2", 400), ("11", 400), ("1, 2", 400)):
        asked = requests.get(stack["edge"] + "/images/probe.jpg", headers={"API-Version": version}, timeout=30)
        assert asked.status_code == status, version  # an unserved API-Version is the app's 400 there too
        if status == 400:
            assert asked.json()["code"] == "unsupported_api_version"


@needs_caddy
def test_a_range_request_is_the_apps_to_answer(stack):
    """file_server answered an unknown or upper-case unit and an invalid range with a text/plain 416,
    a suffix of 0 with a broken 206, and its 416 could not be kept out of caches but by marking every
    ranged answer no-store (cache_audit24 M2, M3; review24b M1): the app answers every Range, with
    file_server's ETag, so a validator from either is good at the other."""
    app = f"http://127.0.0.1:{stack['SITE_PORT']}"
    etag = requests.get(stack["edge"] + "/images/probe.jpg", timeout=30).headers["ETag"]
    assert requests.get(app + "/images/probe.jpg", timeout=30).headers["ETag"] == etag
    past = requests.get(stack["edge"] + "/images/probe.jpg", headers={"Range": "bytes=999999-"}, timeout=30)
    assert past.status_code == 416 and past.json()["code"] == "range_not_satisfiable"
    assert past.headers["Cache-Control"] == "no-store"  # an error about one request's Range is kept by no cache
    for asked, status, body in (("bytes=0-5", 206, b"static"), ("BYTES=0-5", 206, b"static"),
                                ("items=0-5", 200, b"static file\n"), ("bytes=9-2", 200, b"static file\n"),
                                ("bytes=0-1,4-5", 200, b"static file\n")):  # several: the whole file, not multipart
        answer = requests.get(stack["edge"] + "/images/probe.jpg", headers={"Range": asked}, timeout=30)
        assert (answer.status_code, answer.content) == (status, body), asked
        assert "immutable" in answer.headers["Cache-Control"] and answer.headers["ETag"] == etag, asked
    assert requests.get(stack["edge"] + "/images/probe.jpg", headers={"Range": "bytes=-0"}, timeout=30).status_code == 416
    stale = requests.get(stack["edge"] + "/images/probe.jpg", headers={"Range": "bytes=0-5", "If-Range": '"old"'},
                         timeout=30)
    assert stale.status_code == 200 and stale.text == "static file\n" and "immutable" in stale.headers["Cache-Control"]
    kept = requests.get(stack["edge"] + "/images/probe.jpg", headers={"Range": "bytes=0-5", "If-None-Match": etag},
                        timeout=30)
    assert kept.status_code == 304 and "immutable" in kept.headers["Cache-Control"]


@needs_caddy
def test_what_no_image_file_answers_goes_to_the_app(stack, edge):
    """A missing file, a directory or a write under /images/ answers as the app does (JSON 404 with
    suggestions, 405 with Allow), never cached; the files that exist keep the year's cache."""
    for path in ("/images/nope.json", "/images/full/nope.jpg", "/images/", "/images/full/"):
        r = edge.get(path, headers={"Accept": "application/json"})
        assert r.status_code == 404 and r.json()["code"] == "not_found" and r.json()["suggestions"], path
        assert r.headers["Cache-Control"] == "no-store", path
    missing_md = edge.get("/images/nope.jpg", headers={"Accept": "text/markdown"})
    assert missing_md.status_code == 404 and missing_md.text.startswith("# Not found")
    for path in ("/images/probe.jpg", "/images/full/" + edge.get("/images/manifest.json").json()["photos"][0]["full"].rsplit("/", 1)[1]):
        posted = edge.request("POST", path, data=b"x")
        assert posted.status_code == 405 and posted.headers["Allow"] == "GET, HEAD, OPTIONS", path
        got = requests.get(stack["edge"] + path, timeout=30)
        expected = photos.ORIGINAL_CACHE if path.startswith("/images/full/") else photos.THUMBNAIL_CACHE
        assert got.status_code == 200 and got.headers["Cache-Control"] == expected, path
        assert got.headers["Access-Control-Allow-Origin"] == "*", path
    # What the edge hands on reaches the app as it was sent: an escape (an original's slash as %2F,
    # as generated clients send it) is not escaped again into a path that names nothing.
    escaped = "/images/full%2F" + edge.get("/images/manifest.json").json()["photos"][0]["full"].rsplit("/", 1)[1]
    assert requests.get(stack["edge"] + escaped, timeout=30).status_code == 200
    assert requests.post(stack["edge"] + escaped, data=b"x", timeout=30).status_code == 405
    assert requests.get(stack["edge"] + escaped, headers={"Range": "bytes=0-1,5-6"}, timeout=30).status_code == 200
    assert requests.get(stack["edge"] + escaped, headers={"API-Version": "2"}, timeout=30).status_code == 400


@needs_caddy
def test_unpublished_originals_never_leave_the_edge(site_settings, tmp_path):
    """With originals_public = false (SITE_ORIGINALS_PUBLIC, read by the app and Caddy alike) the
    edge hands /images/full/ to the app, which answers 404, even for a file that exists there;
    thumbnails are still served."""
    as_json = {"Accept": "application/json"}
    hidden = dataclasses.replace(site_settings, originals_public=False)
    original = next(hidden.photos_dir.glob("*.jpg")).name
    thumb = next(hidden.images_dir.glob("*.jpg")).name
    with serve_wsgi(make_app(hidden).wsgi) as base, caddy_in_front(
            int(base.rsplit(":", 1)[1]), tmp_path, SITE_ORIGINALS_PUBLIC="false",
            SITE_PHOTOS_DIR=str(hidden.photos_dir), SITE_IMAGES_DIR=str(hidden.images_dir)) as port:
        edge = f"http://127.0.0.1:{port}"
        for method in ("GET", "HEAD"):
            r = requests.request(method, f"{edge}/images/full/{original}", headers=as_json, timeout=30)
            assert r.status_code == 404 and r.headers["Cache-Control"] == "no-store", method
            assert r.headers["Content-Type"].startswith("application/json"), method
        assert "not published" in requests.get(f"{edge}/images/full/{original}", headers=as_json, timeout=30).json()["error"]
        r = requests.get(f"{edge}/images/{thumb}", timeout=30)
        assert r.status_code == 200 and "immutable" in r.headers["Cache-Control"]
    with serve_wsgi(make_app(site_settings).wsgi) as base, caddy_in_front(
            int(base.rsplit(":", 1)[1]), tmp_path, SITE_IMAGES_DIR=str(hidden.images_dir)) as port:
        r = requests.get(f"http://127.0.0.1:{port}/images/full/{original}", timeout=30)
        assert r.status_code == 200 and r.headers["Content-Type"] == "image/jpeg"


@needs_caddy
def test_the_edge_adds_one_server_field_and_compresses_every_json_type(stack):
    for path in ("/robots.txt", "/data/site/pages", "/images/probe.jpg", "/images/nope.jpg"):
        r = requests.get(stack["edge"] + path, timeout=30)
        assert r.raw.headers.getlist("Server") == ["Caddy"], path
    for path in ("/openapi.json", "/.well-known/api-catalog", "/search.json?q=honda"):
        r = requests.get(stack["edge"] + path, headers={"Accept-Encoding": "gzip"}, timeout=30)
        assert r.status_code == 200 and r.headers.get("Content-Encoding") == "gzip", path


@needs_caddy
@pytest.mark.parametrize("encoding", ["gzip", "zstd, gzip"])
def test_a_head_through_the_edge_carries_the_gets_headers(stack, encoding):
    """Caddy compressed a HEAD's empty body too: its Content-Length had been that of an empty gzip
    stream (20 bytes), while the GET sends the document's. A HEAD now describes the identity
    document: its true length, and otherwise the GET's fields."""
    for path in ("/sitemap.xml", "/openapi.json", "/llms.txt", "/about.md", "/search.json?q=honda"):
        got = requests.get(stack["edge"] + path, headers={"Accept-Encoding": encoding}, timeout=30)
        head = requests.head(stack["edge"] + path, headers={"Accept-Encoding": encoding}, timeout=30)
        assert head.status_code == got.status_code == 200 and head.content == b"", path
        plain = requests.get(stack["edge"] + path, headers={"Accept-Encoding": "identity"}, timeout=30)
        assert got.headers["Content-Encoding"] and head.headers["Content-Length"] == str(len(plain.content)), path
        ignored = {"date", "content-length", "transfer-encoding", "content-encoding", "vary", "ratelimit"}
        assert ({k.lower(): v for k, v in head.headers.items() if k.lower() not in ignored}
                == {k.lower(): v for k, v in got.headers.items() if k.lower() not in ignored}), path


@needs_caddy
def test_a_compressed_document_revalidates_through_the_edge(stack):
    """The app's ETags are weak because Caddy compresses the bodies and passes them on: a client
    that got the gzip body sends that tag back and gets a 304 either way."""
    for path in ("/llms.txt", "/openapi.json", "/about", "/about.md", "/.well-known/agent-card.json"):
        for encoding in ("gzip", "identity"):
            first = requests.get(stack["edge"] + path, headers={"Accept-Encoding": encoding}, timeout=30)
            assert first.headers["ETag"].startswith('W/"'), path
            again = requests.get(stack["edge"] + path, timeout=30,
                                 headers={"Accept-Encoding": encoding, "If-None-Match": first.headers["ETag"]})
            assert (again.status_code, again.content) == (304, b""), (path, encoding)
        assert first.status_code == 200 and requests.get(stack["edge"] + path, timeout=30, headers={
            "Accept-Encoding": "gzip"}).headers.get("Content-Encoding") == "gzip", path


@needs_caddy
def test_datasette_links_reach_clients_in_rfc_8288_form(stack):
    r = requests.get(stack["edge"] + "/data/site/pages", timeout=30)
    link = r.headers["Link"]
    assert link.startswith("<http") and '>; rel="alternate"' in link, link
    assert r.links["alternate"]["url"].endswith("/data/site/pages.json")


@needs_caddy
def test_a_query_string_cannot_add_links_to_datasettes_answers(stack):
    """Datasette wrote the query string into its Link as it came, and the edge's <> around the text
    up to the first ";" made the rest further links: a caller could add rel=preload or stylesheet
    links of its choosing to a /data/ page (sec_audit24 #3). The URL in a Link is percent-encoded."""
    hostile = "a=1;b,<https://evil.example/>;rel=preload;as=script x\"y"
    for base in (stack["edge"], f"http://127.0.0.1:{stack['DATASETTE_PORT']}"):
        connection = http.client.HTTPConnection(urlsplit(base).hostname, urlsplit(base).port, timeout=30)
        connection.request("GET", "/data/site/pages?" + hostile.replace(" ", "+"))
        link = connection.getresponse().headers["Link"]
        connection.close()
        assert link == (f'<{base}/data/site/pages.json?a=1%3Bb%2C%3Chttps://evil.example/%3E%3Brel=preload%3Bas=script'
                        f'+x%22y>; rel="alternate"; type="application/json+datasette"'), (base, link)
        moved = requests.get(base + "/data/site/pages?_sort=title&_sort_by_desc=on", allow_redirects=False, timeout=30)
        assert moved.headers["Link"] == "</data/site/pages?_sort_desc=title>; rel=preload", base


@needs_caddy
def test_datasette_keeps_data_in_its_redirects_and_links(stack):
    """Datasette's own redirects (a trailing slash, a %-escape turned into its ~ form, an old
    settings page) and its links keep the /data/ prefix, through the edge and straight from
    Datasette alike, and lead to its pages, not to the app's."""
    redirects = {"/data/site/": "/data/site", "/data/site/pages/": "/data/site/pages",
                 "/data/site/pages/%2Fabout": "/data/site/pages/~2Fabout", "/data/-/config": "/data/-/settings"}
    for base in (stack["edge"], f"http://127.0.0.1:{stack['DATASETTE_PORT']}"):
        for path, location in redirects.items():
            r = requests.get(base + path, allow_redirects=False, timeout=30)
            assert r.status_code in (301, 302) and r.headers["Location"] == location, (base, path, r.headers.get("Location"))
            followed = requests.get(base + location, timeout=30)
            assert followed.status_code == 200 and "datasette" in followed.text.lower(), (base, location)
        page = requests.get(base + "/data/site/pages", timeout=30)
        assert 'href="/data/site/pages.json"' in page.text and 'href="/data/site/pages?_sort=title"' in page.text
        assert "/data/data/" not in page.text + page.headers["Link"], base


@needs_caddy
def test_a_missing_image_is_the_apps_json_404_for_every_client_but_a_browser_tab(stack, edge):
    for accept in (None, "*/*", "image/avif,image/webp,image/*,*/*;q=0.8"):
        r = edge.get("/images/nope.jpg", headers={"Accept": accept})
        assert r.status_code == 404 and r.json()["code"] == "not_found", accept
    tab = edge.get("/images/nope.jpg", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert tab.status_code == 404 and tab.headers["Content-Type"].startswith("text/html")


@needs_caddy
def test_photo_archive_through_the_edge(stack, edge):
    manifest = edge.get("/images/manifest.json").json()
    assert manifest["count"] >= 24  # the demo set `make run` generates on first run
    thumb = manifest["photos"][0]["thumb_small"]
    path = "/images/" + thumb.rsplit("/images/", 1)[1]
    r = requests.get(stack["edge"] + path, timeout=30)
    assert r.status_code == 200 and r.headers["Content-Type"] == "image/jpeg" and "immutable" in r.headers["Cache-Control"]
    original = requests.get(stack["edge"] + "/images/full/" + manifest["photos"][0]["full"].rsplit("/", 1)[1], timeout=30)
    assert original.status_code == 200
    table = requests.get(stack["edge"] + "/data/site/photos", timeout=30).text
    assert '<img src="/images/' in table  # the thumbnail plugin
    facets = requests.get(stack["edge"] + "/data/site/photos.json?_size=0", timeout=30).json()["facet_results"]
    facet_names = set(facets["results"] if "results" in facets else facets)
    assert {"camera", "lens", "film", "year"} <= facet_names


@needs_caddy
def test_access_log_is_json_lines_without_query_strings(stack):
    """The privacy page: questions, search terms and inspected URLs are not kept with an address."""
    requests.get(stack["edge"] + "/about", headers={"User-Agent": "GPTBot/1.2"}, timeout=30)
    # answers that repeat the query in a header: the app's trailing-slash 308, Datasette's redirect
    # and the alternate Link of each of its HTML pages
    for path in ("/ask/?query=my-private-moved", "/data/site/pages/?_search=my-private-redirect",
                 "/data/site/pages?_search=my-private-table"):
        requests.get(stack["edge"] + path, allow_redirects=False, timeout=30, headers={"User-Agent": "Privacy/0.9"})
    requests.get(stack["edge"] + "/search.json?q=my-private-search", timeout=30,
                 headers={"User-Agent": "Privacy/1.0", "Referer": "https://aadhar.sh/ask?query=my-private-question"})
    log = stack["tmp"] / "access.log"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "Privacy/1.0" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.2)
    assert log.stat().st_mode & 0o077 == 0  # addresses and headers: the user's alone (sec_audit24 #6)
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    bot = [e for e in entries if "GPTBot/1.2" in e["request"]["headers"].get("User-Agent", [""])[0]]
    assert bot and bot[-1]["request"]["uri"] == "/about" and bot[-1]["status"] == 200
    (searched,) = [e for e in entries if e["request"]["headers"].get("User-Agent") == ["Privacy/1.0"]]
    assert searched["request"]["uri"] == "/search.json?" and searched["status"] == 200
    assert searched["request"]["headers"]["Referer"] == ["https://aadhar.sh/ask?"]
    assert "my-private" not in log.read_text()


@needs_caddy
def test_oversized_headers_are_refused_at_the_edge_and_not_logged(stack):
    """A request's headers are bounded before the log: one of megabytes would be a line of
    megabytes, and a few dozen would roll the unread crawler hits out of the access log."""
    big = requests.get(stack["edge"] + "/about", headers={"User-Agent": "Huge/1.0", "X-Pad": "x" * 40_000}, timeout=30)
    fine = requests.get(stack["edge"] + "/about", headers={"User-Agent": "Padded/1.0", "X-Pad": "x" * 16_000}, timeout=30)
    assert big.status_code == 431 and fine.status_code == 200
    log = stack["tmp"] / "access.log"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "Padded/1.0" not in log.read_text():
        time.sleep(0.2)
    assert "Padded/1.0" in log.read_text() and "Huge/1.0" not in log.read_text()


@needs_caddy
def test_ledger_reads_the_real_caddy_log(stack, edge):
    for _ in range(3):
        requests.get(stack["edge"] + "/writing/llms-txt", headers={"User-Agent": "Mozilla/5.0 (compatible; ClaudeBot/1.0)"},
                     timeout=30)
    requests.get(stack["edge"] + "/about", headers={"User-Agent": "Mozilla/5.0 Firefox/140.0"}, timeout=30)
    log = stack["tmp"] / "access.log"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and log.read_text().count("ClaudeBot") < 3:
        time.sleep(0.2)
    out = subprocess.run([sys.executable, "jobs.py", "run", "ledger"], cwd=ROOT, env=stack["env"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    body = edge.get("/ledger.json").json()
    hits = {item["bot"]: item["hits"] for item in body["line_items"]}
    assert hits["claudebot"] == 3 and body["total_hits"] >= 3


@needs_caddy
def test_jobs_scheduler_runs_every_job_at_start(stack):
    """A fresh stack runs every job at once, the weekly and daily ones too: none has succeeded yet."""
    assert stack["proc"].poll() is None
    assert requests.get(f"http://127.0.0.1:{stack['SITE_PORT']}/", timeout=30).status_code == 200
    deadline, ran = time.monotonic() + 90, set()
    while time.monotonic() < deadline and ran != set(jobs.JOBS):
        with contextlib.closing(sqlite3.connect(f"file:{stack['tmp'] / 'site.db'}?mode=ro", uri=True)) as conn:
            ran = {name for (name,) in conn.execute("SELECT name FROM job_runs WHERE finished IS NOT NULL")}
        time.sleep(0.5)
    assert ran == set(jobs.JOBS)


@needs_caddy
def test_ask_through_caddy_both_ways(stack, edge):
    answer = edge.get("/ask?query=which+relational+engine+keeps+the+records&streaming=0&top_k=3",
                      headers={"Accept-Encoding": "gzip"})
    assert answer.status_code == 200 and len(answer.json()["results"]) == 3
    assert answer.json()["_meta"]["ranking"].startswith("model:")
    with httpx.Client(base_url=stack["edge"], timeout=30, headers={"Accept-Encoding": "gzip, zstd"}) as client:
        with connect_sse(client, "GET", "/ask", params={"query": "which relational engine keeps the records",
                                                         "top_k": "3"}) as source:
            # Caddy's encode matcher leaves event streams alone: compressed frames would wait for a full block.
            assert "content-encoding" not in source.response.headers
            assert source.response.headers["x-accel-buffering"] == "no"
            kinds = [json.loads(event.data)["message_type"] for event in source.iter_sse()]
    assert kinds == ["begin-nlweb-response", "result", "result", "result", "end-nlweb-response"]


class SlowStreams:
    """A WSGI app of the tests' own behind the project's Caddyfile: /frames holds its second frame
    until the client has seen the first; /endless writes until its client goes away."""

    def __init__(self):
        self.first_received = threading.Event()
        self.stopped = threading.Event()
        self.made = []

    def __call__(self, environ, start_response):
        start_response("200 OK", [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")])
        return self.frames() if environ["PATH_INFO"] == "/frames" else self.endless()

    def frames(self):
        yield b"data: one\n\n"
        assert self.first_received.wait(10), "the edge held the first frame back"
        yield b"data: two\n\n"

    def endless(self):
        try:
            for n in range(4000):
                self.made.append(n)
                yield b"data: %d\n\n" % n
                time.sleep(0.005)
        finally:
            self.stopped.set()


@contextlib.contextmanager
def caddy_in_front(app_port: int, tmp, **extra_env: str):
    """The project's Caddyfile on a loopback port of its own, proxying to `app_port`."""
    port, datasette_port = [p for p in free_ports(3) if p != app_port][:2]  # not the app's, which may be free
    env = {**os.environ, "SITE_ADDRESS": f":{port}", "CADDY_BIND": "127.0.0.1", "CADDY_ADMIN": "off",
           "SITE_PORT": str(app_port), "DATASETTE_PORT": str(datasette_port), "SITE_ACCESS_LOG": str(tmp / "access.log"),
           "SITE_IMAGES_DIR": str(tmp), "XDG_DATA_HOME": str(tmp / "xdg-data"),
           "XDG_CONFIG_HOME": str(tmp / "xdg-config"), "HOME": str(tmp), **extra_env}
    with running([CADDY, "run", "--config", str(ROOT / "Caddyfile"), "--adapter", "caddyfile"],
                 lambda: accepts(port), "caddy", timeout=30, cwd=ROOT, env=env):
        yield port


@needs_caddy
def test_the_production_admin_socket_serves_a_reload(tmp_path):
    """deploy/site-caddy.service's CADDY_ADMIN and ExecReload, with /run/site-caddy moved to tmp_path."""
    unit = (ROOT / "deploy" / "site-caddy.service").read_text()
    admin = re.search(r"^Environment=CADDY_ADMIN=(.*)$", unit, re.M)[1].replace("/run/site-caddy", str(tmp_path))
    reload = re.search(r"^ExecReload=(.*)$", unit, re.M)[1].replace("/run/site-caddy", str(tmp_path))
    reload = reload.replace("/srv/site/Caddyfile", str(ROOT / "Caddyfile")).replace("/usr/bin/caddy", CADDY).split()
    app = free_ports(1)[0]
    with caddy_in_front(app, tmp_path, CADDY_ADMIN=admin) as port:
        env = {**os.environ, "CADDY_ADMIN": admin, "SITE_ADDRESS": f":{port}", "CADDY_BIND": "127.0.0.1", "SITE_PORT": str(app),
               "SITE_ACCESS_LOG": str(tmp_path / "access.log"), "SITE_IMAGES_DIR": str(tmp_path), "HOME": str(tmp_path)}
        done = subprocess.run(reload, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        assert (tmp_path / "admin.sock").is_socket()  # the reloaded config keeps the admin API there


@pytest.fixture(scope="module")
def slow_edge(tmp_path_factory):
    streams = SlowStreams()
    with serve_wsgi(streams) as base, caddy_in_front(int(base.rsplit(":", 1)[1]), tmp_path_factory.mktemp("edge")) as port:
        yield streams, port


@needs_caddy
def test_edge_passes_each_frame_on_as_it_is_written(slow_edge):
    streams, port = slow_edge
    sock = open_stream(f"http://127.0.0.1:{port}", "/frames", "Accept-Encoding: gzip, zstd\r\n")
    try:
        head = read_until(sock, b"data: one")
        assert b"data: two" not in head and b"Content-Encoding" not in head
        streams.first_received.set()
        read_until(sock, b"data: two")
    finally:
        sock.close()


@needs_caddy
def test_a_client_that_leaves_the_edge_stops_the_stream(slow_edge):
    streams, port = slow_edge
    sock = open_stream(f"http://127.0.0.1:{port}", "/endless", "Accept-Encoding: gzip, zstd\r\n")
    read_until(sock, b"data: 0")
    sock.close()
    assert streams.stopped.wait(10), "the stream ran on after its client left the edge"
    assert len(streams.made) < 4000


def plain_ok(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


@needs_caddy
def test_slow_request_bodies_at_the_edge_leave_the_app_to_everyone_else(tmp_path):
    """waitress keeps at most 100 connections; a body it is still waiting for holds one. The edge
    reads each body whole before it asks the app, so 110 bodies that never finish arriving (one
    caller could send them; none reaches the rate limiter) hold nothing of the app's, and another
    visitor is answered (load_audit23 #1: every route hung until the bodies ended)."""
    def read_body(environ, start_response):
        environ["wsgi.input"].read()
        return plain_ok(environ, start_response)

    with serve_wsgi(read_body) as base, caddy_in_front(int(base.rsplit(":", 1)[1]), tmp_path) as port:
        stalled = []
        try:
            for _ in range(110):
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                sock.sendall(b"POST /ask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 60000\r\n\r\n{\"query\": ")
                stalled.append(sock)
            time.sleep(1)  # for the edge to have passed on whatever it would
            answer = requests.get(f"http://127.0.0.1:{port}/search.json", timeout=20)
            assert answer.status_code == 200 and answer.text == "ok"
        finally:
            for sock in stalled:
                sock.close()


@needs_caddy
def test_a_body_that_never_ends_is_given_up_at_the_edges_time_limit(tmp_path):
    """The edge holds a body until it is whole, so it gives up on one that stops arriving (20 s;
    SITE_BODY_TIMEOUT, 2 s here), freeing what it held: the client is answered or the connection
    closed (review23 #1: 120 bodies stalled for good held 711 MB of Caddy's memory)."""
    def read_body(environ, start_response):
        environ["wsgi.input"].read()
        return plain_ok(environ, start_response)

    with serve_wsgi(read_body) as base, caddy_in_front(int(base.rsplit(":", 1)[1]), tmp_path, SITE_BODY_TIMEOUT="2s") as port:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"POST /ask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 60000\r\n\r\n{")
            sock.recv(65536)  # the edge's answer, or b"" when it closes; socket.timeout (a failure) after 30 s


@needs_caddy
def test_ledger_follows_the_real_caddy_log_rolls(tmp_path):
    """Caddy's own roller, set to 1 MiB: access.log becomes access-<UTC time>.log and then .log.gz
    while the ledger job is part-way through it. Runs before, across and after two rolls count every
    crawler request exactly once."""
    settings = feeds_settings(tmp_path, access_log=str(tmp_path / "access.log"))
    padding = {"X-Padding": "p" * 8000}  # Caddy logs request headers: ~8.5 KB a line, 1 MiB in ~120 requests
    sent = 0

    def send(session, port, user_agent: str, count: int) -> None:
        nonlocal sent
        for _ in range(count):
            sent += 1
            r = session.get(f"http://127.0.0.1:{port}/r{sent}", headers={"User-Agent": user_agent, **padding}, timeout=30)
            assert r.status_code == 200
        # Caddy writes the line after the response; lines are written in order, so the last one
        # appearing in the live file means every earlier one is on disk (in it or a rolled file)
        deadline = time.monotonic() + 15
        while f'"uri":"/r{sent}"' not in (tmp_path / "access.log").read_text():
            assert time.monotonic() < deadline, "caddy did not log the last request"
            time.sleep(0.1)

    def compressed_rolls(count: int) -> list:
        # The roller writes the .gz in place and deletes the plain copy once it is whole: wait for both,
        # so that the job does not see a file vanish between listing and opening it.
        deadline = time.monotonic() + 15
        while len(rolled := sorted(tmp_path.glob("access-*.log.gz"))) < count or list(tmp_path.glob("access-*.log")):
            assert time.monotonic() < deadline, f"caddy rolled {sorted(p.name for p in tmp_path.iterdir())}"
            time.sleep(0.1)
        return rolled

    def hits() -> dict[str, int]:
        with contextlib.closing(db.connect(settings.db_path, readonly=True)) as conn:
            return {item["bot"]: item["hits"] for item in ledger(conn, settings)["line_items"]}

    with serve_wsgi(plain_ok) as base, requests.Session() as session, \
            caddy_in_front(int(base.rsplit(":", 1)[1]), tmp_path, SITE_LOG_ROLL_SIZE="1MiB") as port:
        send(session, port, USER_AGENTS["gptbot"], 30)
        send(session, port, USER_AGENTS["browser"], 10)
        assert "from 1 file(s): 30 crawler hits" in run_ledger(settings)
        assert not list(tmp_path.glob("access-*"))

        send(session, port, USER_AGENTS["claudebot"], 100)  # rolls once, after the job's position
        send(session, port, USER_AGENTS["browser"], 20)
        rolled = compressed_rolls(1)
        assert re.fullmatch(r"access-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}\.log\.gz", rolled[0].name)
        assert "from 2 file(s): 100 crawler hits" in run_ledger(settings)
        assert hits() == {"gptbot": 30, "claudebot": 100}

        send(session, port, USER_AGENTS["gptbot"], 130)  # rolls again
        compressed_rolls(2)
        assert "from 2 file(s): 130 crawler hits" in run_ledger(settings)
        assert "read 0 log lines" in run_ledger(settings)
        assert hits() == {"gptbot": 160, "claudebot": 100}


@needs_caddy
def test_the_app_down_is_a_json_502_at_the_edge(tmp_path):
    with caddy_in_front(free_port(), tmp_path) as port:  # no app listens there: down or restarting
        down = requests.get(f"http://127.0.0.1:{port}/search.json?q=honda", timeout=30)
        data = requests.get(f"http://127.0.0.1:{port}/data/site/pages.json", timeout=30)  # nor Datasette
    assert data.status_code == 502 and data.json()["code"] == "upstream_unavailable"
    assert data.json()["error"].startswith("The site's data browser (Datasette) is not answering")
    assert down.status_code == 502 and down.headers["Content-Type"] == "application/json"
    assert down.headers["Cache-Control"] == "no-store"
    assert down.json() == {"error": "The site's app is not answering (it may be restarting); try again in a few "
                                    "seconds.", "code": "upstream_unavailable", "status": 502}


@needs_caddy
def test_the_edge_serves_originals_only_as_their_published_copies(site_settings, tmp_path):
    """/images/full/ at the edge is the ingest job's folder of public copies, served by Caddy itself:
    a published original comes without GPS, serial numbers or owner name and with the same pixels;
    a file of the originals folder the job did not publish is the app's JSON 404; with
    originals_public = false no spelling of the path reaches a copy."""
    settings = dataclasses.replace(site_settings, db_path=tmp_path / "site.db", photos_dir=tmp_path / "originals",
                                   images_dir=tmp_path / "images")
    paths = demo_photos.generate(settings.photos_dir, count=2)
    shutil.copy(paths[0], settings.photos_dir / ".draft.jpg")
    (settings.photos_dir / "sub").mkdir()
    shutil.copy(paths[0], settings.photos_dir / "sub" / "extra.jpg")
    assert ingest.run_photos(settings).startswith("added 2, updated 0, removed 0, failed 0")
    as_json = {"Accept": "application/json"}
    folders = {"SITE_IMAGES_DIR": str(settings.images_dir), "SITE_PHOTOS_DIR": str(settings.photos_dir)}
    with serve_wsgi(make_app(settings).wsgi) as base, caddy_in_front(int(base.rsplit(":", 1)[1]), tmp_path,
                                                                     **folders) as port:
        r = requests.get(f"http://127.0.0.1:{port}/images/full/{paths[1].name}", timeout=30)
        assert r.status_code == 200 and r.headers["Content-Type"] == "image/jpeg"
        assert r.headers["Cache-Control"] == photos.ORIGINAL_CACHE and "RateLimit-Policy" not in r.headers  # Caddy's own
        original = paths[1].read_bytes()  # a photo with a lens, so with a lens serial too
        for secret in (demo_photos.BODY_SERIAL, demo_photos.LENS_SERIAL, demo_photos.OWNER, "FFDT00424242"):
            assert secret.encode() in original and secret.encode() not in r.content, secret
        image = exiv2.ImageFactory.open(r.content)
        image.readMetadata()
        assert not [d.key() for d in image.exifData() if d.key().startswith(("Exif.GPSInfo.", "Exif.Fujifilm."))]
        with Image.open(io.BytesIO(r.content)) as served, Image.open(io.BytesIO(original)) as source:
            assert np.array_equal(np.asarray(served), np.asarray(source))
        for name in (".draft.jpg", "sub/extra.jpg"):
            r = requests.get(f"http://127.0.0.1:{port}/images/full/{name}", headers=as_json, timeout=30)
            assert r.status_code == 404 and r.json()["code"] == "not_found", name
            assert r.headers["Cache-Control"] == "no-store", name
    hidden = dataclasses.replace(settings, originals_public=False)
    with serve_wsgi(make_app(hidden).wsgi) as base, caddy_in_front(int(base.rsplit(":", 1)[1]), tmp_path,
                                                                   SITE_ORIGINALS_PUBLIC="false", **folders) as port:
        for path in ("/images/full/", "/images/./full/", "/images//full/", "/images/x/../full/", "/images/%2e/full/"):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("GET", path + paths[0].name, headers=as_json)  # sent as written
            answer = connection.getresponse()
            body = answer.read()
            connection.close()
            assert answer.status in (400, 404) and not body.startswith(b"\xff\xd8"), path


@needs_caddy
def test_ctrl_c_stops_every_process_make_run_started(stack):
    """Last in this file, as it stops the module's stack: Ctrl-C, to a stack started with SIGINT
    ignored (see `stack`), leaves no process behind, not even a zombie."""
    started = children(stack["proc"].pid)
    assert len(started) == 4  # app, Datasette, jobs, Caddy
    stack["proc"].send_signal(signal.SIGINT)
    assert stack["proc"].wait(timeout=60) == 0
    assert [pid for pid in started if os.path.exists(f"/proc/{pid}")] == []
