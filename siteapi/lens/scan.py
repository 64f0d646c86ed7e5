"""The full lens scan: the page pass plus discovery, wire, terms, agent doors, bot views and readiness.

Every subrequest of an uncached scan (40 to 42: the page, the markdown check, 21 well-known
paths, agents.md or AGENTS.md, /mcp, /ask, the declared sitemap, 3 DNS-AID and 1 ECH lookup, and
10 bot views) runs on one thread pool under ONE deadline and one subrequest cap; what did not
finish in time is reported as not answered (`unknown`), never waited for; before the first of
them the scan spends the target's budget (targets.py). What the probes find
joins what the page shows (`ai.llmsTxtPresent` counts /llms.txt). The origin's discovery result
is cached in site.db for `discovery_cache_hours` (cache.py): the probes (their bodies already cut
short), the robots.txt text the verdicts are read from for each page, and what later passes read
from the well-known documents (the agent doors, the keyless reason, the TDMRep terms), never the
documents themselves; a result longer than the cache takes (cache.MAX_PAYLOAD_BYTES), or one in
which a probe failed for now (no answer in time, a 5xx), is not cached.
Also here: `summary` (LensSummary) and `compare` (LensComparison).
"""
from __future__ import annotations

import logging
import sqlite3
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait

from .. import db
from ..ratelimit import TargetBudget
from ..web import ApiError
from . import agent, bots, cache, discovery, observe, readiness, targets, terms
from .discovery import DnsClient, Fetched, Subrequests
from .fetch import FetchFailed, Fetcher, FetchRefused, fetcher_from_settings
from .settings import lens_settings, scan_settings

log = logging.getLogger(__name__)

TIMED_OUT = "not answered before the scan's deadline"
# Bumped when the cached result's keys change: a row of another shape (an earlier release's) is a miss.
DISCOVERY_SHAPE = 2


def _dns_client(conf: dict) -> DnsClient:
    servers = conf["dns_nameservers"]
    if not servers:
        return DnsClient()
    host, _, port = servers[0].partition("#")  # "127.0.0.1#5353" names a port
    return DnsClient([host] + [s.partition("#")[0] for s in servers[1:]], int(port or 53))


def _result(future: Future, fallback):
    if future.done() and not future.cancelled():
        try:
            return future.result()
        except Exception:  # a probe bug must cost one probe, not the scan
            log.exception("lens probe failed")
    return fallback


def scan(url: str | None, settings, fetcher: Fetcher | None = None, bot_views: bool = True,
         conn: sqlite3.Connection | None = None, dns: DnsClient | None = None,
         budget: TargetBudget | None = None) -> dict:
    """The full LensObservation, spending `budget` (targets.py). Raises ApiError 400 (missing/refused
    URL), 429 (the target's budget spent) or 502 (page failed)."""
    conf, page_conf = scan_settings(settings), lens_settings(settings)
    fetcher = fetcher or fetcher_from_settings(settings)
    dns = dns or _dns_client(conf)
    target = observe.checked(url, fetcher)
    origin = target.origin
    deadline = time.monotonic() + conf["scan_timeout_s"]
    cached = cache.read(conn, cache.DISCOVERY, origin, conf["discovery_cache_hours"])
    if cached and cached.get("shape") != DISCOVERY_SHAPE:
        cached = None
    fetcher = targets.spending(fetcher, budget, target)
    sub = Subrequests(fetcher, deadline, conf["subrequest_cap"], conf["probe_timeout_s"])
    pool = ThreadPoolExecutor(max_workers=conf["concurrency"], thread_name_prefix="lens-scan")
    try:
        sub.take()
        page_future = pool.submit(fetcher.fetch, target.url, deadline=deadline)
        md_future = pool.submit(agent.md_answer, sub, target.url)
        found = None if cached else _discovery_futures(pool, sub, origin)
        dns_futures = {} if cached else {"dnsAid": pool.submit(discovery.dns_aid, sub, dns, target.host),
                                         "ech": pool.submit(discovery.ech, sub, dns, target.host)}
        view_futures = [pool.submit(bots.view, sub, target.url, spec) for spec in bots.VIEWS] if bot_views else []
        try:
            page = page_future.result(timeout=max(0.1, sub.remaining()))
        except (FetchRefused, FetchFailed) as failed:
            raise observe.fetch_error(failed) from None
        except TimeoutError:
            raise ApiError(502, "The site took too long to answer.", code="upstream_failed", ok=False) from None
        payload = cached or _collect_discovery(pool, sub, origin, found, dns_futures)
        wait([md_future, *view_futures], timeout=max(0, sub.remaining()))
        md = agent.md_negotiation(_result(md_future, {"error": TIMED_OUT}), page.headers)
        views = [_result(f, ({"key": s[0], "label": s[1], "role": s[2], "userAgent": s[4], "status": None,
                              "blocked": False, "challenge": False, "error": TIMED_OUT}, ""))
                 for f, s in zip(view_futures, bots.VIEWS)]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    if not cached and payload.pop("_complete") and not sub.capped:
        cache.write(conn, cache.DISCOVERY, origin, payload)
    payload.pop("_complete", None)

    obs = observe.observation(page, page_conf, settings.site_host)
    obs["phases"] = {"page": True, "discovery": True, "botViews": bool(bot_views),
                     "discoveryCached": bool(cached), "subrequestCap": sub.capped}
    obs["discovery"] = _discovery_object(payload, origin, obs)
    obs["wire"] = {"dictionary": discovery.dictionary(page.headers), "ech": payload["ech"]}
    obs["terms"] = _terms(payload, page, obs, origin)
    obs["agent"] = _agent(payload, obs, md)
    obs["ai"]["llmsTxtPresent"] = obs["ai"]["llmsTxtPresent"] or obs["agent"]["llmsTxt"]["present"]
    rows = [row for row, _ in views]
    if bot_views:
        obs["phases"]["wallCheck"] = bots.wall_check(views, settings)
    obs["botViews"] = rows
    obs["readiness"] = readiness.readiness(obs, payload["keyless"], rows if bot_views else None)
    return obs


def _discovery_futures(pool, sub: Subrequests, origin: str) -> dict:
    futures = {key: pool.submit(discovery.run_probe, sub, key, origin + path, cap)
               for key, (path, cap) in discovery.PATHS.items()}
    futures["agentsMd"] = pool.submit(discovery.agents_md, sub, origin)
    futures["mcpEndpoint"] = pool.submit(agent.fetch_endpoint, sub, origin + "/mcp")
    futures["askEndpoint"] = pool.submit(agent.fetch_endpoint, sub, origin + "/ask")
    return futures


def _collect_discovery(pool, sub: Subrequests, origin: str, futures: dict, dns_futures: dict) -> dict:
    """Waits (within the deadline) for the discovery subrequests; what is missing is 'not answered'."""
    for key in ("robotsTxt", "sitemapXml"):
        wait([futures[key]], timeout=max(0, sub.remaining()))
    robots = _result(futures["robotsTxt"], None)
    sitemap = _result(futures["sitemapXml"], None)
    declared = None
    if robots is not None:
        declared = pool.submit(discovery.sitemap_declared, sub, robots.text, origin, sitemap.probe if sitemap else None)
    everything = [*futures.values(), *dns_futures.values(), *([declared] if declared else [])]
    wait(everything, timeout=max(0, sub.remaining()))
    complete = all(f.done() for f in everything)
    fetched: dict[str, Fetched] = {}
    for key, (path, _) in discovery.PATHS.items():
        late = Fetched(discovery.probe_result(key, origin + path, error=TIMED_OUT), unreachable=True)
        fetched[key] = _result(futures[key], late)
    robots = fetched["robotsTxt"]
    agents_md = _result(futures["agentsMd"], {"ok": False, "present": False, "unknown": True, "error": TIMED_OUT})
    # A probe that failed for now (no answer, a 5xx) says "check again later": kept six hours, every
    # scan in them would have answered with that failure.
    transient = any(f.unreachable or (f.status or 0) >= 500 for f in fetched.values()) or agents_md.get("unknown")
    return {
        "_complete": complete and not transient,
        "shape": DISCOVERY_SHAPE,
        "probes": {key: f.probe for key, f in fetched.items()},
        "doors": {key: agent.door(fetched[key].probe, fetched[key].data, describe) for key, describe in (
            ("agentCard", agent.describe_card), ("openapi", agent.describe_openapi),
            ("aiPlugin", agent.describe_plugin), ("apiCatalog", agent.describe_catalog))},
        "keyless": readiness.keyless_reason(fetched["openapi"].data),
        "tdmrep": terms.tdmrep_file(fetched["tdmrep"].data, fetched["tdmrep"].probe),
        "robots": {"text": robots.text, "status": robots.status, "unreachable": robots.unreachable},
        "sitemapDeclared": _result(declared, {"ok": False, "url": "", "error": TIMED_OUT}) if declared else None,
        "agentsMd": agents_md,
        "mcpEndpoint": _result(futures["mcpEndpoint"], {"error": TIMED_OUT}),
        "askEndpoint": _result(futures["askEndpoint"], {"error": TIMED_OUT}),
        "dnsAid": _result(dns_futures["dnsAid"], {"ok": False, "found": False, "error": TIMED_OUT}),
        "ech": _result(dns_futures["ech"], {"observed": False, "recordPresent": False, "parsed": False, "error": TIMED_OUT}),
    }


def _discovery_object(payload: dict, origin: str, obs: dict) -> dict:
    probes = payload["probes"]
    out = {"origin": origin, "feeds": discovery.feeds((obs.get("structured") or {}).get("relLinks") or []),
           "oauthDiscovery": {"openidConfiguration": probes["openidConfiguration"],
                              "oauthAuthorizationServer": probes["oauthAuthorizationServer"]},
           "commerce": {"ucp": probes["ucp"], "acp": probes["acp"], "ap2": probes["ap2"]}}
    for key in ("robotsTxt", "sitemapXml", "llmsTxt", "llmsFullTxt", "aiTxt", "securityTxt", "webBotAuth",
                "oauthProtectedResource", "authMd", "mcpServerCard", "agentSkills", "apiCatalog", "openapi",
                "aiPlugin", "agentCard", "tdmrep"):
        out[key] = probes[key]
    out["sitemapDeclared"] = payload["sitemapDeclared"]
    out["dnsAid"] = payload["dnsAid"]
    out["agentsMd"] = payload["agentsMd"]
    return out


def _terms(payload: dict, page, obs: dict, origin: str) -> dict:
    robots = payload["robots"]
    state, why = terms.robots_state(robots["status"], robots["unreachable"], robots["text"])
    url, caveat = terms.rules_url(origin, page.url, page.final_url)
    board = terms.scoreboard(robots["text"], state, url, why, caveat)
    signals = terms.content_signals(robots["text"] if state == "present" else None)
    paid = terms.paid(page.status, page.headers, page.body)
    challenged = bots.is_challenge(page.headers, page.body)
    enforcement = {"status": page.status, "challenged": challenged,
                   "blocked": challenged or page.status in terms.BLOCKING_STATUSES}
    directives = terms.directives(obs.get("ai"))
    tdm = terms.tdmrep(payload["tdmrep"], payload["probes"]["tdmrep"], page.headers,
                       (obs.get("structured") or {}).get("meta"))
    return {"path": "/robots.txt", "robotsPresent": state == "present", "robotsUnknown": state == "unknown",
            "robotsError": why, "scoreboard": board, "signals": signals, "paid": paid, "enforcement": enforcement,
            "directives": directives, "tdmrep": tdm,
            "spectrum": terms.spectrum(board, state, signals, paid, enforcement, directives, tdm)}


def _agent(payload: dict, obs: dict, md: dict) -> dict:
    probes, doors = payload["probes"], payload["doors"]
    mcp = agent.mcp_verdict(payload["mcpEndpoint"], bool(probes["mcpServerCard"].get("ok")))
    nlweb = agent.nlweb_verdict(payload["askEndpoint"])
    web_mcp = agent.webmcp((obs.get("anatomy") or {}).get("rawHtml", ""))
    llms_probe = probes["llmsTxt"]
    llms = {"present": bool(llms_probe.get("ok")),
            "unknown": bool(llms_probe.get("error")) or (llms_probe.get("status") or 0) >= 500}
    return {"mcp": mcp, "nlweb": nlweb, "webmcp": web_mcp, **doors, "mdNegotiation": md, "llmsTxt": llms,
            "strategy": agent.strategy(mcp, nlweb, web_mcp, doors, md, llms)}


# --- summary and compare ------------------------------------------------------------------------

DOOR_VERDICTS = ("yes", "likely", "maybe")


def doors(obs: dict) -> int | None:
    a = obs.get("agent")
    if not a:
        return None
    return (sum(1 for k in ("mcp", "nlweb") if a[k]["verdict"] in DOOR_VERDICTS) + int(a["webmcp"]["found"])
            + sum(1 for k in ("agentCard", "openapi", "apiCatalog") if a[k].get("present")))


def surfaces(obs: dict) -> dict | None:
    a = obs.get("agent")
    if not a:
        return None
    return {"llms": a["llmsTxt"]["present"], "markdown": a["mdNegotiation"]["supported"],
            "mcp": a["mcp"]["verdict"] in ("yes", "likely"), "agentCard": bool(a["agentCard"].get("present")),
            "apiCatalog": bool(a["apiCatalog"].get("present"))}


def summary(obs: dict) -> dict:
    """LensSummary (API.md §2.6) of one observation."""
    anatomy = obs.get("anatomy") or {}
    ready = obs.get("readiness")
    cost = None
    if obs.get("cost"):
        tiers = {t["key"]: t for t in obs["cost"]["tiers"]}
        tier = tiers.get("html") or tiers.get("raw") or next(iter(tiers.values()), None)
        rate = obs["cost"]["rates"][0] if obs["cost"]["rates"] else None
        if tier and rate:
            cost = {"tokens": tier["tokens"], "usdPerRead": round(tier["tokens"] * rate["usdPerMtok"] / 1e6, 6),
                    "model": rate["model"]}
    terms_found = obs.get("terms")
    return {
        "url": obs["url"], "finalUrl": obs["finalUrl"], "redirected": obs["redirected"], "status": obs["status"],
        "contentType": obs["contentType"], "elapsedMs": obs["elapsedMs"], "truncated": obs["truncated"],
        "title": (obs.get("structured") or {}).get("title") or "", "wordCount": anatomy.get("wordCount", 0),
        "bytes": anatomy.get("rawBytes"), "parsedBytes": anatomy.get("parsedBytes"),
        "parseTruncated": bool(anatomy.get("parseTruncated")),
        "readiness": ready["overall"] if ready else None, "fieldScore": ready["field"]["overall"] if ready else None,
        "level": ready["level"] if ready else None, "levelName": ready["levelName"] if ready else None,
        "levelNote": ready["levelNote"] if ready else None,
        "tier": (terms_found["spectrum"]["tier"] if not terms_found["robotsUnknown"] or terms_found["spectrum"]["tier"] != "open"
                 else "unknown") if terms_found else None,
        "doors": doors(obs), "cost": cost, "phases": obs["phases"], "surfaces": surfaces(obs),
        "crawlers": [{"ua": c["ua"], "verdict": c["verdict"], "role": c.get("role")} for c in terms_found["scoreboard"]]
        if terms_found else None,
        "nextActions": ready.get("nextActions") if ready else None,
    }


COMPARED = (("status", "Status"), ("finalUrl", "Final URL"), ("contentType", "Content type"), ("title", "Title"),
            ("wordCount", "Words"), ("bytes", "Bytes"), ("readiness", "Readiness score"), ("level", "Level"),
            ("tier", "AI terms tier"), ("doors", "Agent doors"))
SURFACE_LABELS = {"llms": "llms.txt", "markdown": "Markdown negotiation", "mcp": "MCP server",
                  "agentCard": "A2A agent card", "apiCatalog": "API catalog"}


def changes(left: dict, right: dict) -> list[dict]:
    out = [{"field": key, "label": label, "before": left.get(key), "after": right.get(key)}
           for key, label in COMPARED if left.get(key) != right.get(key)]
    for key, label in SURFACE_LABELS.items():
        before, after = (left.get("surfaces") or {}).get(key), (right.get("surfaces") or {}).get(key)
        if before != after:
            out.append({"field": f"surfaces.{key}", "label": label, "before": before, "after": after})
    return out


def compare(left: str | None, right: str | None, settings, fetcher: Fetcher | None = None,
            dns: DnsClient | None = None, budget: TargetBudget | None = None) -> dict:
    """LensComparison of two URLs (no bot views), each side a fresh scan spending `budget`. 400 names
    the side refused, 429 the side whose target's budget is spent, 502 the side that failed."""
    fetcher = fetcher or fetcher_from_settings(settings)
    urls = {"left": left, "right": right}
    if not any(value and str(value).strip() for value in urls.values()):
        raise ApiError(400, "Send both addresses to compare, as left and right, for example "
                       "left=https://example.com/&right=https://example.org/.", code="missing_url", ok=False,
                       parameter="left")
    checked = {side: observe.checked(value, fetcher, parameter=side, side=side) for side, value in urls.items()}
    # Both sides spend before either fetches, so that a refusal comes before any request.
    fetchers = {}
    for side, target in checked.items():
        try:
            fetchers[side] = targets.spending(fetcher, budget, target)
        except ApiError as spent:
            raise _side_error(side, spent) from None
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="lens-compare") as pool:
        futures = {side: pool.submit(scan, value, settings, fetchers[side], False, None, dns)
                   for side, value in urls.items()}
        sides = {}
        for side, future in futures.items():
            try:
                sides[side] = summary(future.result())
            except ApiError as failed:
                raise _side_error(side, failed) from None
    return {"ok": True, "comparedAt": db.now_iso(), "left": sides["left"], "right": sides["right"],
            "changes": changes(sides["left"], sides["right"])}


def _side_error(side: str, failed: ApiError) -> ApiError:
    status = failed.status if failed.status in (400, 429) else 502
    return ApiError(status, f"The {side} URL could not be inspected: {observe.within(failed.body['error'])}",
                    code=failed.body.get("code"), headers=failed.headers, limit=failed.limit, ok=False, side=side,
                    **({"parameter": side} if status == 400 else {}),
                    **({"retry_after": failed.body["retry_after"]} if status == 429 else {}))
