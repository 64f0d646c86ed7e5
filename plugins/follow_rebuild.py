"""Datasette plugin: Datasette follows site.db when it becomes another file.

Datasette reads the file it opened for its life, a deleted one too, and keeps a connection to it in
each of its threads under the database's name, so it cannot be pointed at a new file while it runs.
When site.db is another file (rebuilt by the jobs after a deletion, or a backup moved into place)
that may stand in for the one it opened (`db.can_serve`, the app's rule: its pages, and its photos
or a photos run ended where the old file had photos), Datasette stops serving and exits with status
75 (EX_TEMPFAIL) to be started again on it: by systemd (`Restart=on-failure`,
deploy/site-datasette.service) and by `make run` (siteapi/stack.py `watch`).
"""
import atexit
import os
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

from datasette import hookimpl

from siteapi import db

CHECK_S = 1.0
replaced = threading.Event()


@hookimpl
def startup(datasette):
    path = Path(next(d.path for d in datasette.databases.values() if d.path))
    try:
        served = db.connect(path, readonly=True)
        # Read now: SQLite opens the -wal by name at a connection's first read, and after a rebuild
        # that name is the new file's, which would make the old file look empty to the rule.
        served.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:  # deleted since Datasette opened it: a rebuild is coming
        print(f"datasette: cannot open {path} ({exc}); exiting with status {os.EX_TEMPFAIL} to be started again.",
              file=sys.stderr, flush=True)
        os._exit(os.EX_TEMPFAIL)
    # A thread, not a task: `datasette serve` runs the startup hooks in a loop of their own, which
    # stops before uvicorn starts the one that serves.
    threading.Thread(target=follow, args=(path, served), name="follow-rebuild", daemon=True).start()
    # uvicorn (0.29 and later) stops serving on SIGTERM after the requests under way, puts back the
    # handler it found (this one) and raises the signal again: the exit status is chosen there.
    signal.signal(signal.SIGTERM, after_serving)


def follow(path: Path, served: sqlite3.Connection) -> None:
    opened = db.identity_of(path)
    while True:
        time.sleep(CHECK_S)
        current = db.identity_of(path)
        if current is not None and current != opened and db.can_serve(path, served):
            break
    print(f"datasette: {path} is a new file; exiting with status {os.EX_TEMPFAIL} to be started again on it.",
          file=sys.stderr, flush=True)
    replaced.set()
    atexit.register(os._exit, os.EX_TEMPFAIL)  # the status where uvicorn does not raise the signal again
    os.kill(os.getpid(), signal.SIGTERM)


def after_serving(signum, frame) -> None:
    if replaced.is_set():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(os.EX_TEMPFAIL)
    signal.signal(signum, signal.SIG_DFL)  # a stop from outside ends the process as it would have
    signal.raise_signal(signum)
