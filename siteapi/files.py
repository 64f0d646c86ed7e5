"""Files other than site.db's content: the lock files beside site.db that let one run of a job (and
one scheduler, one `make run`) at a time use it, and the synced write, rename and folder flush that
put a file in place (site.db itself when it is made, a thumbnail, a demo photo, the bot key) so
that a power loss leaves the old file or the whole new one under its name, never a part.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO


def lock_path(db_path: Path, holder: str) -> Path:
    """The lock file beside site.db of a job (`job-photos`), the scheduler or `make run` (`stack`)."""
    return Path(f"{db_path}-{holder}.lock")


def try_lock(path: Path) -> IO | None:
    """The open lock file, holding an exclusive lock on it until closed; None while another
    process (or another run in this one) holds it. Opened for reading, which is all flock needs:
    a lock file made by a run by hand as another user (root) still serves the service's user."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return open(fd)  # noqa: SIM115 - the caller holds it open for as long as it holds the lock


def lock_held(path: Path) -> bool | None:
    """Whether some process holds try_lock's lock on `path`, read from /proc/locks without taking
    it (taking it, even for a moment, would turn away a run starting then); None when it cannot be
    told (no /proc)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return False  # no run ever took it
    except OSError:
        return None
    try:
        held = Path("/proc/locks").read_text()
    except OSError:
        return None
    # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF": the device as hex major:minor, then the inode
    ident = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    return any(fields[1] == "FLOCK" and fields[5] == ident
               for fields in (line.split() for line in held.splitlines()) if len(fields) > 5)


def write_synced(path: Path, payload: bytes) -> None:
    """A new file at `path` holding `payload`, flushed to the disk (fsync) before this returns, so
    that once it is renamed into place (`replace_synced`) a power loss cannot leave that name on an
    empty or partial file. A write that fails (a full disk) leaves no file at `path`."""
    try:
        with open(path, "wb") as out:
            out.write(payload)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def replace_synced(source: Path, target: Path) -> None:
    """Rename `source`, a file already on the disk (`write_synced`), onto `target` in one step, and
    flush the folder (fsync) so that the new name survives a power loss too."""
    os.replace(source, target)
    sync_folder(target.parent)


def sync_folder(folder: Path) -> None:
    """Flush a folder's entries (fsync), so that a name just made in it survives a power loss."""
    handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)
