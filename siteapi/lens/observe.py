"""The page-only LensObservation of `/lens/fetch?phases=page` (API.md §2.5): one fetch through the
safe fetcher, the page pass and its token cost; `phases` says which passes ran (a pass that did
not run leaves its fields absent, never zero). Also the helpers the full scan shares: the URL
check, the fetch-error mapping and the page-derived fields.
"""
from __future__ import annotations

import logging

from ..ratelimit import TargetBudget
from ..web import ApiError
from . import cost, page, targets
from .fetch import USER_AGENT, FetchFailed, Fetcher, FetchRefused, FetchResult, Target, fetcher_from_settings
from .settings import lens_settings

log = logging.getLogger(__name__)
PHASES = ("page",)


def within(sentence: str) -> str:
    """A sentence continued after a colon: "the URL ...", but "URLs with credentials ..." as it is."""
    return sentence[0].lower() + sentence[1:] if sentence[1:2].islower() else sentence


def checked(url: str | None, fetcher: Fetcher, parameter: str = "url", side: str | None = None) -> Target:
    """The URL someone sent, normalised and checked against the fetcher's rules before any network
    step; ApiError 400 naming the parameter (and the side of a comparison) when missing or refused."""
    where = {"parameter": parameter, **({"side": side} if side else {})}
    if url is None or not str(url).strip():
        raise ApiError(400, f"Send the address to inspect as {parameter}, for example "
                       f"{parameter}=https://example.com/.", code="missing_url", ok=False, **where)
    try:
        return fetcher.check(str(url))
    except FetchRefused as refused:
        sentence = f"The {side} URL is refused: {within(str(refused))}" if side else str(refused)
        raise ApiError(400, sentence, code="url_refused", ok=False, **where) from None


def fetch_error(failed: FetchRefused | FetchFailed) -> ApiError:
    """The answer when fetching a checked URL went wrong: refused on the way (its name resolves to a
    private address, or it redirects to one) is the caller's 400; a redirect to a host whose budget
    is spent a 429; anything else is the site's 502."""
    if isinstance(failed, FetchRefused):
        return ApiError(400, str(failed), code="url_refused", ok=False, parameter="url")
    if isinstance(failed, targets.TargetSpent):
        return targets.refusal(failed)
    return ApiError(502, str(failed), code="upstream_failed", ok=False)


def check_phases(phases: str | None) -> None:
    """ApiError 400 for a `phases` other than page (None: not sent)."""
    if phases is not None and phases not in PHASES:
        raise ApiError(400, "phases accepts only page (the fields derived from the page itself); leave it out for the full scan.",
                       code="bad_phases", ok=False, parameter="phases")


def inspect(url: str | None, settings, phases: str, fetcher: Fetcher | None = None,
            budget: TargetBudget | None = None) -> dict:
    """The LensObservation of the `phases` asked for, spending `budget` (targets.py). Raises
    ApiError 400 (missing/refused URL, bad phases), 429 (the target's budget spent) or 502."""
    fetcher = fetcher or fetcher_from_settings(settings)
    target = checked(url, fetcher)
    check_phases(phases)
    conf = lens_settings(settings)
    fetcher = targets.spending(fetcher, budget, target)
    try:
        result = fetcher.fetch(target.url)
    except (FetchRefused, FetchFailed) as failed:
        raise fetch_error(failed) from None
    return observation(result, conf, settings.site_host)


def observation(result: FetchResult, conf: dict, site_host: str) -> dict:
    """The page-derived fields of a LensObservation for one fetch result."""
    framable, frame_reason = page.frame_policy(result.headers, result.final_url, site_host)
    body = result.body if result.body_unreadable is None else b""
    try:
        analysed = page.analyse(body, result.content_type, result.headers, result.final_url,
                                parse_bytes=conf["parse_kb"] * 1024)
    except Exception:  # a parser bug on hostile input must cost one answer, not the process
        log.exception("page pass failed for %s", result.final_url)
        raise ApiError(502, "The page could not be analysed.", code="upstream_failed", ok=False) from None
    observed = {
        "ok": True,
        "url": result.url,
        "finalUrl": result.final_url,
        "redirected": result.redirected,
        "status": result.status,
        "contentType": result.content_type,
        "binary": analysed.binary,
        "truncated": result.truncated,
        "elapsedMs": result.elapsed_ms,
        "fetchedBy": USER_AGENT,
        "headers": result.headers,
        "framable": framable,
        "frameReason": frame_reason,
        "phases": {"page": True, "discovery": False, "botViews": False},
        "anatomy": analysed.anatomy,
        "structured": analysed.structured,
        "ai": analysed.ai,
        "cost": None if result.body_unreadable else cost.price(analysed, conf),
    }
    if result.body_unreadable:
        observed["bodyUnreadable"] = result.body_unreadable
    return observed
