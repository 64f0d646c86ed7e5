"""Run every benchmark in one go and write bench/RESULTS.md from what each prints.

    .venv/bin/python bench/run_all.py            # all of them (~10 minutes on 2 cores)
    .venv/bin/python bench/run_all.py search ask # some of them

Each bench_<name>.py prints a Markdown section with its figures and the command that reproduces
it; the figures in RESULTS.md are from one run on one machine, side by side.
"""
from __future__ import annotations

import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["search", "ask", "photos", "lens"]


def main(names: list[str]) -> int:
    names = names or [n for n in ORDER if (HERE / f"bench_{n}.py").exists()]
    sections = []
    for name in names:
        print(f"running bench_{name}.py ...", file=sys.stderr, flush=True)
        out = subprocess.run([sys.executable, f"bench_{name}.py"], cwd=HERE, capture_output=True, text=True)
        if out.returncode != 0:
            sections.append(f"## bench_{name}.py failed\n\n```\n{out.stderr[-2000:]}\n```\n")
        else:
            sections.append(out.stdout.strip() + "\n")
    header = [
        "# Benchmark results", "",
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, {platform.python_version()}, "
        f"2 cores, by `.venv/bin/python bench/run_all.py {' '.join(names)}` (or `make bench`). "
        "Targets are ratios measured side by side in one run; absolute figures move with the machine's load.", "",
    ]
    (HERE / "RESULTS.md").write_text("\n".join(header) + "\n".join(sections))
    print((HERE / "RESULTS.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
