"""Named rate-limit policies per caller, counted by the `limits` library, and the IETF headers.

Headers follow draft-ietf-httpapi-ratelimit-headers: `RateLimit-Policy: "read";q=120;w=60` and
`RateLimit: "read";r=<remaining>;t=<seconds to reset>`; a refusal also gets `Retry-After`
(1..60 s). Counting uses a moving window, so exactly q requests pass in any w seconds, however
many threads race; `storage` may be `redis://...` when several processes share the counts.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Mapping

from limits import RateLimitItemPerSecond
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter

from siteapi.config import RatePolicy


@dataclass(frozen=True)
class Decision:
    allowed: bool
    policy: RatePolicy
    remaining: int
    reset: int  # whole seconds until a unit frees up

    def headers(self) -> dict[str, str]:
        out = {
            "RateLimit-Policy": f'"{self.policy.name}";q={self.policy.quota};w={self.policy.window}',
            "RateLimit": f'"{self.policy.name}";r={self.remaining};t={self.reset}',
        }
        if not self.allowed:
            out["Retry-After"] = str(max(1, min(60, self.reset)))
        return out


class RateLimiter:
    def __init__(self, policies: Mapping[str, RatePolicy], storage: str = "memory://"):
        self.policies = policies
        self._items = {name: RateLimitItemPerSecond(p.quota, p.window) for name, p in policies.items()}
        self._limiter = MovingWindowRateLimiter(storage_from_string(storage))

    def hit(self, policy: str, caller: str) -> Decision:
        """Spend one unit of `policy` for `caller` if one is left."""
        item = self._items[policy]
        allowed = self._limiter.hit(item, policy, caller)
        stats = self._limiter.get_window_stats(item, policy, caller)
        reset = max(0, math.ceil(stats.reset_time - time.time()))
        return Decision(allowed, self.policies[policy], stats.remaining, reset)

    def policy_header(self, policy: str) -> str:
        p = self.policies[policy]
        return f'"{p.name}";q={p.quota};w={p.window}'
