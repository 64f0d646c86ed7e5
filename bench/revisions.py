"""A measurement of this tree and of another git revision side by side, in one run: the revision is
checked out in a temporary git worktree, and the two are measured in turn, `rounds` times each, so
that a change in the machine's load falls on both; `run_probe` runs a probe script in each tree."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, TypeVar

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def side_by_side(revision: str, measure: Callable[[Path], T], rounds: int) -> dict[str, list[T]]:
    """{"this tree": [...], revision: [...]}: `measure(tree)` for each, `rounds` times in turn."""
    with tempfile.TemporaryDirectory() as folder:
        other = Path(folder) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(other), revision], check=True)
        try:
            figures = {"this tree": [], revision: []}
            for _ in range(rounds):
                figures["this tree"].append(measure(ROOT))
                figures[revision].append(measure(other))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)], check=True)
    return figures


def run_probe(probe: str, tree: Path):
    """What the script `probe` prints last, as JSON, run in a fresh interpreter with `tree` as its
    argument (a side-by-side measure: each tree imports its own code)."""
    out = subprocess.run([sys.executable, "-c", probe, str(tree)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
