"""The per-target budget as the lens spends it (`ratelimit.TargetBudget` counts it).

A fresh scan is lens work for a caller that goes out to the network: `/lens/fetch` in every phase
and mode, each side of `/lens/compare.json`, an MCP snapshot capture or compare. It spends one unit
of the budget of each site it sends a request to: the target's before the first request, and any
other site (a redirect's, a declared sitemap's) before the first hop to it; mode=cloudflare spends
the target's unit and one of the CDN scanner's own site, which it asks. Answers from the lens
caches spend nothing; a scan whose discovery is cached still fetches the page and spends. The
owner's jobs (the census) pass no budget.

A site is what `site_of` names: a name's registrable domain, by the public suffix list, so that a
server answering every subdomain (wildcard DNS) is one site and not one per name, while the users
of github.io or the companies under co.uk stay apart; an IPv4 address itself; an IPv6 address by
its /64, which one machine can fill with addresses, as the per-caller limits count callers.
Ports and schemes do not make another site: they reach the same machine.
"""
from __future__ import annotations

import functools
import ipaddress
import threading
from urllib.parse import urlsplit

from publicsuffixlist import PublicSuffixList

from ..ratelimit import Decision, TargetBudget, address_key, in_seconds
from ..web import ApiError
from .fetch import FetchFailed, Fetcher, Target


@functools.cache
def _public_suffixes() -> PublicSuffixList:
    return PublicSuffixList()  # the list the package ships; nothing is fetched


def site_of(host: str) -> str:
    """The site a request to `host` (ASCII, no brackets, no trailing dot) is counted against."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        name = host.lower()
        return _public_suffixes().privatesuffix(name) or name  # a public suffix itself is its own site
    return address_key(host)


def _described(site: str) -> str:
    if "/" in site:
        return f"the addresses in {site}"
    if site.replace(".", "").isdigit() or _public_suffixes().privatesuffix(site) is None:
        return site  # an address, or a public suffix (github.io) whose subdomains are other sites
    return f"{site} and its subdomains"


class TargetSpent(FetchFailed):
    """The site's budget is spent: before the first request a 429, on a later hop that hop fails."""

    def __init__(self, site: str, decision: Decision):
        self.decision = decision
        self.retry_after = decision.retry_after
        super().__init__(_spent_sentence(f"fresh scans of {_described(site)}", decision, "so that it cannot be turned "
                                         f"on one site; retry in {in_seconds(self.retry_after)}."))


def _spent_sentence(what: str, decision: Decision, why: str) -> str:
    if decision.policy.name.endswith("_caller"):
        return (f"You have had the {decision.policy.quota} {what} one caller may have in {decision.policy.window} "
                f"seconds (requests refused for the site's own budget count too), so that no one caller can keep "
                f"a site from the others; retry in {in_seconds(decision.retry_after)}.")
    return (f"The lens has made the {decision.policy.quota} {what} it makes in {decision.policy.window} seconds "
            f"for all its callers together, {why}")


class Visits:
    """One fresh scan's spending: the first visit to a site spends its unit, later ones ride on it."""

    def __init__(self, budget: TargetBudget):
        self.budget = budget
        self._lock = threading.Lock()  # the scan's probes visit from a thread pool
        self._decisions: dict[str, Decision] = {}

    def __call__(self, target: Target) -> None:
        site = site_of(target.host)
        with self._lock:
            if site not in self._decisions:
                self._decisions[site] = self.budget.spend(site)
            decision = self._decisions[site]
        if not decision.allowed:
            raise TargetSpent(site, decision)


def refusal(spent: TargetSpent) -> ApiError:
    return ApiError(429, str(spent), code="rate_limited", ok=False, retry_after=spent.retry_after,
                    limit=spent.decision)


def spend_on_scanner(budget: TargetBudget | None, scanner_url: str) -> None:
    """One unit of the CDN scanner's own site (mode=cloudflare): a third party asked on behalf of
    every caller is a site like any other. ApiError 429 when spent."""
    if budget is None:
        return
    site = site_of((urlsplit(scanner_url).hostname or "").rstrip("."))
    decision = budget.spend(site)
    if not decision.allowed:
        raise ApiError(429, _spent_sentence(f"requests to the agent-readiness scanner at {_described(site)}", decision,
                                            f"a third party asked on every caller's behalf; retry in "
                                            f"{decision.retry_after} seconds."),
                       code="rate_limited", ok=False, retry_after=decision.retry_after, limit=decision)


def spending(fetcher: Fetcher, budget: TargetBudget | None, target: Target) -> Fetcher:
    """The fetcher for one fresh scan of `target`, its site's unit spent now: ApiError 429 when
    that budget is spent, before any request. Without a budget (the jobs) the fetcher itself."""
    if budget is None:
        return fetcher
    visits = Visits(budget)
    try:
        visits(target)
    except TargetSpent as spent:
        raise refusal(spent) from None
    return fetcher.visiting(visits)
