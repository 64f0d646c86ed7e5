"""Datasette plugin: Datasette follows site.db when it becomes another file.

Datasette reads the file it opened for its life, a deleted one too, and keeps a connection to it in
each of its threads under the database's name, so it cannot be pointed at a new file while it runs.
When site.db is another file (rebuilt by the jobs after a deletion, or a backup moved into place)
that may stand in for the one it opened (`db.can_serve`, the app's rule: its pages, and its photos
or a photos run ended where the old file had photos), Datasette stops serving and exits with status
75 (EX_TEMPFAIL) to be started again on it: by systemd (`Restart=on-failure`,
deploy/site-datasette.service) and by `make run` (siteapi/stack.py `watch`).
"""
import contextlib
import os
import signal
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
    # A thread, not a task: `datasette serve` runs the startup hooks in a loop of their own, which
    # stops before uvicorn starts the one that serves.
    path = Path(next(d.path for d in datasette.databases.values() if d.path))
    threading.Thread(target=follow, args=(path,), name="follow-rebuild", daemon=True).start()
    # uvicorn stops serving on SIGTERM after the requests under way, puts back the handler it found
    # (this one) and raises the signal again: the exit status is chosen there.
    signal.signal(signal.SIGTERM, after_serving)


def follow(path: Path) -> None:
    opened = db.identity_of(path)
    with contextlib.closing(db.connect(path, readonly=True)) as served:
        while True:
            time.sleep(CHECK_S)
            current = db.identity_of(path)
            if current is not None and current != opened and db.can_serve(path, served):
                break
    print(f"datasette: {path} is a new file; exiting with status {os.EX_TEMPFAIL} to be started again on it.",
          file=sys.stderr, flush=True)
    replaced.set()
    os.kill(os.getpid(), signal.SIGTERM)


def after_serving(signum, frame) -> None:
    if replaced.is_set():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(os.EX_TEMPFAIL)
    signal.signal(signum, signal.SIG_DFL)  # a stop from outside ends the process as it would have
    signal.raise_signal(signum)
