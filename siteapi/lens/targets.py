"""The per-target budget as the lens spends it (`ratelimit.TargetBudget` counts it).

A fresh scan is lens work for a caller that goes out to the network: `/lens/fetch` in every phase
and mode, each side of `/lens/compare.json`, an MCP snapshot capture or compare. It spends one unit
of the budget of each host it sends a request to: the target's before the first request, and any
other host (a redirect's, a declared sitemap's) before the first hop to it. Answers from the lens
caches spend nothing; a scan whose discovery is cached still fetches the page and spends. Keyed
by host, not origin (http and https reach one server) and not registrable domain (no public
suffix list is installed, and guessing one would lump unrelated sites under co.uk or github.io).
The owner's jobs (the census) pass no budget.
"""
from __future__ import annotations

import threading

from ..ratelimit import Decision, TargetBudget
from ..web import ApiError
from .fetch import FetchFailed, Fetcher, Target


class TargetSpent(FetchFailed):
    """The host's budget is spent: before the first request a 429, on a later hop that hop fails."""

    def __init__(self, host: str, decision: Decision):
        self.retry_after = decision.retry_after
        super().__init__(f"The lens has made the {decision.policy.quota} fresh scans of {host} it makes in "
                         f"{decision.policy.window} seconds for all its callers together, so that it cannot be "
                         f"turned on one site; retry in {self.retry_after} seconds.")


class Visits:
    """One fresh scan's spending: the first visit to a host spends its unit, later ones ride on it."""

    def __init__(self, budget: TargetBudget):
        self.budget = budget
        self._lock = threading.Lock()  # the scan's probes visit from a thread pool
        self._decisions: dict[str, Decision] = {}

    def __call__(self, host: str) -> None:
        with self._lock:
            if host not in self._decisions:
                self._decisions[host] = self.budget.spend(host)
            decision = self._decisions[host]
        if not decision.allowed:
            raise TargetSpent(host, decision)


def refusal(spent: TargetSpent) -> ApiError:
    return ApiError(429, str(spent), code="target_rate_limited", ok=False, retry_after=spent.retry_after,
                    headers={"Retry-After": str(spent.retry_after)})


def spending(fetcher: Fetcher, budget: TargetBudget | None, target: Target) -> Fetcher:
    """The fetcher for one fresh scan of `target`, its host's unit spent now: ApiError 429 when
    that budget is spent, before any request. Without a budget (the jobs) the fetcher itself."""
    if budget is None:
        return fetcher
    visits = Visits(budget)
    try:
        visits(target.host)
    except TargetSpent as spent:
        raise refusal(spent) from None
    return fetcher.visiting(visits)
