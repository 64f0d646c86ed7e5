"""The rate limiter's cost: hits per second and bytes per caller, ours against the `limits` library.

    cd bench && ../.venv/bin/python bench_ratelimit.py

Three counters take the same hits side by side, in turn, 3 rounds each: `RateLimiter` on
memory:// (MemoryWindows, what one app process uses), `limits`' MovingWindowRateLimiter on its
MemoryStorage (what the app used before), and no limiting (the loop alone). Each round, 1 thread and
then 4 threads (waitress's threads, contending for the lock) spend `read` units for 508 callers
picked at random, with the quota raised so nobody is refused (as in the /search.json wrk runs). Memory: a flood of 100,000 callers seen once each, measured with
tracemalloc, divided by the callers.
"""
from __future__ import annotations

import gc
import random
import sys
import threading
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from limits import RateLimitItemPerSecond  # noqa: E402
from limits.storage import MemoryStorage  # noqa: E402
from limits.strategies import MovingWindowRateLimiter  # noqa: E402

from siteapi.config import RatePolicy  # noqa: E402
from siteapi.ratelimit import RateLimiter  # noqa: E402

POLICY = RatePolicy("read", 1_000_000, 60)
CALLERS = [f"198.51.{n // 256}.{n % 256}" for n in range(508)]
THREADS, SECONDS, ROUNDS, FLOOD = (1, 4), 3.0, 3, 100_000


class LimitsLibrary:
    """The `limits` library's moving window in memory, asked what RateLimiter asks of it."""

    def __init__(self):
        self.item = RateLimitItemPerSecond(POLICY.quota, POLICY.window)
        self.limiter = MovingWindowRateLimiter(MemoryStorage())

    def hit(self, policy: str, caller: str) -> None:
        self.limiter.hit(self.item, policy, caller)
        self.limiter.get_window_stats(self.item, policy, caller)


class NoLimit:
    def hit(self, policy: str, caller: str) -> None:
        pass


def contenders() -> dict:
    return {"RateLimiter (memory://)": lambda: RateLimiter({"read": POLICY}),
            "limits MovingWindow + MemoryStorage": LimitsLibrary, "no limiting": NoLimit}


def hits_per_second(limiter, threads: int) -> float:
    stop = time.monotonic() + SECONDS
    counts = [0] * threads

    def spend(slot: int) -> None:
        pick, n = random.Random(slot).choice, 0
        while time.monotonic() < stop:
            for _ in range(100):
                limiter.hit("read", pick(CALLERS))
            n += 100
        counts[slot] = n

    workers = [threading.Thread(target=spend, args=(slot,)) for slot in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts) / SECONDS


def bytes_per_caller(make) -> float:
    limiter = make()
    limiter.hit("read", "warm-up")
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for n in range(FLOOD):
        limiter.hit("read", f"2001:db8:{n:x}::")
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / FLOOD


def main() -> str:
    runs = {(name, threads): [] for name in contenders() for threads in THREADS}
    for _ in range(ROUNDS):
        for name, threads in runs:
            runs[name, threads].append(hits_per_second(contenders()[name](), threads))
    speed = {key: sorted(values)[ROUNDS // 2] for key, values in runs.items()}
    memory = {name: bytes_per_caller(make) for name, make in contenders().items() if name != "no limiting"}
    ours, library = "RateLimiter (memory://)", "limits MovingWindow + MemoryStorage"
    lines = [
        "## Rate limiter (bench_ratelimit.py)", "",
        "`cd bench && ../.venv/bin/python bench_ratelimit.py` — in one process, side by side: 1 thread, then "
        f"{THREADS[-1]} threads, spend `read` units for {len(CALLERS)} random callers for {SECONDS:.0f} s, each "
        f"counter in turn, {ROUNDS} rounds (median); memory is {FLOOD:,} callers seen once each (tracemalloc).", "",
        "| counter | " + " | ".join(f"hits/s, {n} thread{'s' * (n > 1)}" for n in THREADS)
        + " | bytes per caller seen once |", "|---|" + "---|" * (len(THREADS) + 1),
    ]
    for name in contenders():
        size = f"{memory[name]:,.0f}" if name in memory else "—"
        lines.append(f"| {name} | " + " | ".join(f"{speed[name, n]:,.0f}" for n in THREADS) + f" | {size} |")
    ratios = ", ".join(f"{speed[ours, n] / speed[library, n]:.2f}× with {n}" for n in THREADS)
    lines += ["", f"RateLimiter ÷ limits: **{ratios}** the hits per second, and "
              f"**{memory[library] / memory[ours]:.1f}×** less memory per caller."]
    return "\n".join(lines)


if __name__ == "__main__":
    print(main())
