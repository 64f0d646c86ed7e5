"""Helpers for the HTTP benchmarks: start servers on loopback ports and drive them with wrk."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def process(cmd: list[str], url: str, env: dict | None = None):
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(url, timeout=2).status_code < 500:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{cmd} did not serve {url}")
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# Each request comes from one of 508 documentation-range callers (X-Forwarded-For, trusted from
# 127.0.0.1 as behind Caddy), as real traffic does: every caller stays inside a normal budget.
CALLERS_LUA = """
request = function()
  local net = (math.random(2) == 1) and "203.0.113." or "198.51.100."
  wrk.headers["X-Forwarded-For"] = net .. math.random(1, 254)
  return wrk.format(nil, %s)
end
"""


def lua_script(paths: list[str] | None = None) -> Path:
    """A wrk script spreading requests over the callers, and over `paths` (one at random each) if given."""
    if paths:
        table = "{" + ", ".join(f'"{p}"' for p in paths) + "}"
        source = f"paths = {table}\n" + CALLERS_LUA % "paths[math.random(#paths)]"
    else:
        source = CALLERS_LUA % "nil"
    script = Path(tempfile.mkstemp(suffix=".lua")[1])
    script.write_text(source)
    return script


def wrk(url: str, connections: int = 32, seconds: int = 10, threads: int = 2, paths: list[str] | None = None) -> dict:
    """requests/s and latency percentiles (ms) from `wrk --latency`, many callers, optionally many paths."""
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency",
                          "-s", str(lua_script(paths)), url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)

    def pct(p):
        m = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    return {"rps": rps, "p50": pct(50), "p99": pct(99), "errors": int(non2xx.group(1)) if non2xx else 0}


def python() -> str:
    return sys.executable
