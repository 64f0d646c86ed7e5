"""Wall time of a full lens scan of a loopback fixture site with 50 ms injected latency per request
(target <= 1.5 s: the ~37 subrequests run concurrently, not 37 x 50 ms serially), and the scan's
peak Python memory (tracemalloc, a second run). Run: .venv/bin/python bench/bench_lens_scan.py"""
from __future__ import annotations

import statistics
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from lens_sites import DnsServer, site_fetcher, start_web, stop_web  # noqa: E402
from siteapi.config import load_settings  # noqa: E402
from siteapi.lens import scan  # noqa: E402

LATENCY_S = 0.05
RUNS = 5


def main() -> None:
    web, thread = start_web()
    dns = DnsServer()
    settings = load_settings()
    try:
        scan.scan(web.url("ready.test"), settings, fetcher=site_fetcher(web), dns=dns.client())  # loads the wall model
        web.latency = LATENCY_S
        times, subrequests = [], 0
        for _ in range(RUNS):
            before = web.requests
            started = time.perf_counter()
            obs = scan.scan(web.url("ready.test"), settings, fetcher=site_fetcher(web), dns=dns.client())
            times.append(time.perf_counter() - started)
            subrequests = web.requests - before
        assert obs["readiness"]["level"] == 5
        tracemalloc.start()
        scan.scan(web.url("ready.test"), settings, fetcher=site_fetcher(web), dns=dns.client())
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    finally:
        dns.stop()
        stop_web(web, thread)
    print(f"lens full scan, ready.test, {subrequests} HTTP subrequests + 4 DNS lookups, {int(LATENCY_S * 1000)} ms latency each")
    print(f"  wall time: median {statistics.median(times):.3f} s, max {max(times):.3f} s over {RUNS} runs (target <= 1.5 s;"
          f" serial would be >= {subrequests * LATENCY_S:.2f} s)")
    print(f"  peak Python memory during one scan: {peak / 1e6:.1f} MB (tracemalloc)")


if __name__ == "__main__":
    main()
