"""Named rate-limit policies per caller, and the IETF headers.

Headers follow draft-ietf-httpapi-ratelimit-headers: `RateLimit-Policy: "read";q=120;w=60` and
`RateLimit: "read";r=<remaining>;t=<seconds until a unit frees>`; a refusal also gets
`Retry-After` (1..60 s). Counting is a moving window, so exactly q requests pass in any w
seconds, however many threads race.

One process counts in memory with `MemoryWindows`: a list of hit times per (policy, caller)
under one lock, faster and smaller per caller than the `limits` library's memory storage (its
per-key locks, key building and a timer thread that sweeps every key each 10 ms), as
bench/bench_ratelimit.py measures. Several processes share counts through `limits` with a
`redis://` storage URL; while that store does not answer, each process counts in memory again.

Budgets count requests, not how long they last: `WorkSlots` caps how many slow ones (the lens's
outside fetches) run at once in the process, and for one caller. `TargetBudget` counts the other
way round: the lens's fresh scans of one target site, whoever asks, where the per-caller policies
are counted (so across processes too when the store is shared).
"""
from __future__ import annotations

import bisect
import contextlib
import copy
import functools
import ipaddress
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

from siteapi.config import RatePolicy, option


@functools.lru_cache(maxsize=4096)
def address_key(address: str) -> str:
    """An address in one spelling, IPv4-mapped IPv6 as IPv4, and IPv6 as its /64: the block one
    subscriber is given, so stepping through its 2^64 addresses buys no fresh budget. What is not
    an address (a /64 already, when an MCP tool calls an endpoint for its caller) stays as it is."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if ip.version == 4:
        return str(ip)
    if ip.ipv4_mapped:
        return str(ip.ipv4_mapped)
    return str(ipaddress.IPv6Network((int(ip), 64), strict=False))


def in_seconds(count: int) -> str:
    """A wait as a refusal says it: "1 second", "30 seconds"."""
    return "1 second" if count == 1 else f"{count} seconds"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    policy: RatePolicy
    remaining: int
    reset: int  # whole seconds until a unit frees up

    @property
    def retry_after(self) -> int:
        return max(1, min(60, self.reset))

    def refusal(self) -> str:
        """The sentence of a refusal, for HTTP's 429 and the MCP tools alike."""
        return (f"Too many requests: the {self.policy.name} budget is {self.policy.quota} per {self.policy.window} "
                f"seconds per caller; retry in {in_seconds(self.retry_after)}.")

    def headers(self) -> list[tuple[str, str]]:
        # a refusal's t is its Retry-After: up to 60 seconds (API.md §8), whatever the window
        seconds = self.reset if self.allowed else self.retry_after
        out = [("RateLimit-Policy", f'"{self.policy.name}";q={self.policy.quota};w={self.policy.window}'),
               ("RateLimit", f'"{self.policy.name}";r={self.remaining};t={seconds}')]
        if not self.allowed:
            out.append(("Retry-After", str(self.retry_after)))
        return out


class MemoryWindows:
    """Exact moving windows for one process: per key, the times of the hits still inside the window,
    oldest first. A list, not a deque: a caller seen once costs ~290 bytes instead of ~960, which
    is what a flood of distinct addresses fills memory with until the next sweep."""

    # Hits between sweeps that drop callers whose window has emptied; never fewer than the keys the
    # last sweep kept, so a sweep costs a constant share of the hits however many callers there are.
    # (Not the keys there are now: when every hit is a new caller, that count grows as fast as the
    # hits do and the next sweep never came, so a flood of addresses kept every key it made.) And at
    # least once a PRUNE_SECONDS, so that a flood's keys go soon after it stops, however few the hits.
    PRUNE_EVERY = 4096
    PRUNE_SECONDS = 60

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._hits: dict[tuple, list[float]] = {}
        self._since_prune = 0
        self._kept = 0  # the keys the last sweep left
        self._pruned_at = clock()

    def hit(self, key: tuple, quota: int, window: int) -> tuple[bool, int, float]:
        """Spend one unit if one is left: (allowed, remaining, seconds until the oldest hit expires)."""
        now = self._clock()
        with self._lock:
            hits = self._hits.get(key)
            if hits is None:
                hits = self._hits[key] = []
            elif hits and hits[0] <= now - window:
                del hits[:bisect.bisect_right(hits, now - window)]
            allowed = len(hits) < quota
            if allowed:
                hits.append(now)
            reset = hits[0] + window - now
            self._since_prune += 1
            if self._since_prune >= max(self.PRUNE_EVERY, self._kept) or now - self._pruned_at >= self.PRUNE_SECONDS:
                self._prune(now)
        return allowed, quota - len(hits), reset

    def _prune(self, now: float) -> None:
        self._since_prune, self._pruned_at = 0, now
        for key in [k for k, hits in self._hits.items() if not hits or hits[-1] <= now - k[-1]]:
            del self._hits[key]
        self._kept = len(self._hits)


class RateLimiter:
    def __init__(self, policies: Mapping[str, RatePolicy], storage: str = "memory://"):
        self.policies = policies
        self._windows = MemoryWindows()
        self._shared = None
        if storage != "memory://":
            from limits import RateLimitItemPerSecond
            from limits.storage import storage_from_string
            from limits.strategies import MovingWindowRateLimiter

            self._items = {name: RateLimitItemPerSecond(p.quota, p.window) for name, p in policies.items()}
            self._shared = MovingWindowRateLimiter(storage_from_string(storage))

    def hit(self, policy: str, caller: str) -> Decision:
        """Spend one unit of `policy` for `caller` if one is left."""
        rule = self.policies[policy]
        if self._shared is not None:
            item = self._items[policy]
            try:
                allowed = self._shared.hit(item, policy, caller)
                stats = self._shared.get_window_stats(item, policy, caller)
                return Decision(allowed, rule, stats.remaining, max(0, math.ceil(stats.reset_time - time.time())))
            except Exception:  # the store is down or unreachable (each client raises its own errors)
                pass  # count in this process until it answers again: limited per process, never a 500
        # the window rides in the key so that a sweep (MemoryWindows._prune) knows when a history is over
        allowed, remaining, reset = self._windows.hit((policy, caller, rule.window), rule.quota, rule.window)
        return Decision(allowed, rule, remaining, max(0, math.ceil(reset)))


class SlotsFull(Exception):
    """No slot: `mine` when the caller holds its share, otherwise the process is at its total."""

    def __init__(self, mine: bool, slots: "WorkSlots"):
        self.mine = mine
        what = (f"you already have {slots.per_caller} lens requests running; wait for one to finish"
                if mine else f"the lens is running its {slots.total} requests at once for other callers")
        super().__init__(f"Busy: {what}, then retry in {in_seconds(slots.retry_after)}.")


class WorkSlots:
    """At most `total` pieces of slow work at once in this process and `per_caller` for one caller.
    A lens request holds a waitress thread for up to its deadline (a scan 10 s, one MCP batch of 16
    of them over two minutes); counted only by rate, eight slow scans took all eight threads and
    /search.json waited with them. Refused at once rather than queued, so a refusal costs no thread."""

    retry_after = 5  # seconds; a scan's deadline is 10

    def __init__(self, total: int, per_caller: int):
        self.total, self.per_caller = total, per_caller
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()

    def refusal(self) -> Decision:
        """The caller's share as a refusing limit for the RateLimit headers: q requests running at once."""
        return Decision(False, RatePolicy("lens_running", self.per_caller, self.retry_after), 0, self.retry_after)

    @contextlib.contextmanager
    def slot(self, caller: str) -> Iterator[None]:
        with self._lock:
            mine = self._held[caller] >= self.per_caller
            if mine or sum(self._held.values()) >= self.total:
                raise SlotsFull(mine, self)
            self._held[caller] += 1
        try:
            yield
        finally:
            with self._lock:
                self._held[caller] -= 1
                if not self._held[caller]:
                    del self._held[caller]


class TargetBudget:
    """At most `policy.quota` fresh lens scans of one site per `policy.window` seconds, for every
    caller together: one scan sends about 42 signed requests to the site, so per-caller budgets
    alone let each caller aim over a thousand a minute at a site of its choosing. And at most
    `share` of them (half by default) for any one caller, so that no one caller can keep a site
    from the others: a caller's `inspect` budget (30 a minute) is larger than a site's (20)."""

    def __init__(self, policy: RatePolicy, storage: str = "memory://", share: int | None = None):
        self.policy = policy
        self.share = RatePolicy(f"{policy.name}_caller", share or max(1, policy.quota // 2), policy.window)
        self.caller: str | None = None
        self._limiter = RateLimiter({policy.name: policy, self.share.name: self.share}, storage)

    def for_caller(self, caller: str) -> TargetBudget:
        """This budget, spending `caller`'s share of each site too (the counts are the same)."""
        bound = copy.copy(self)
        bound.caller = caller
        return bound

    def spend(self, site: str) -> Decision:
        if self.caller is not None:
            mine = self._limiter.hit(self.share.name, f"{site} {self.caller}")
            if not mine.allowed:
                return mine
        return self._limiter.hit(self.policy.name, site)


def lens_target_budget(settings) -> TargetBudget:
    """[lens] target_scans (20) per target_window_s (60), target_scans_per_caller (half) of them
    for one caller, in the [rate] storage."""
    scans = option(settings, "lens", "target_scans", 20, 1, 10_000)
    return TargetBudget(RatePolicy("lens_target", scans, option(settings, "lens", "target_window_s", 60, 1, 3600)),
                        settings.rate_storage,
                        option(settings, "lens", "target_scans_per_caller", max(1, scans // 2), 1, 10_000))


def lens_work_slots(settings) -> WorkSlots:
    """[lens] concurrent_scans (4: half of waitress's threads) and concurrent_scans_per_caller (2)."""
    return WorkSlots(option(settings, "lens", "concurrent_scans", 4, 1, 64),
                     option(settings, "lens", "concurrent_scans_per_caller", 2, 1, 64))
