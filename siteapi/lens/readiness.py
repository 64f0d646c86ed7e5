"""The agent-readiness score: checks in categories, overall, the level ladder, next actions, field score.

Every check is pass, fail, unknown (the probe never answered) or neutral (does not apply); the
overall score is passes / (pass + fail + unknown) over the scored checks that are not neutral.
Authority checks (OAuth metadata, auth.md) are neutral with `notApplicable` when the site's own
OpenAPI document declares every operation keyless, and API checks are neutral on a content-only
site that offers no API at all. Levels 0/1/3/5 (Not Ready, Basic Web Presence, Agent-Readable,
Agent-Native), capped at the highest rung <= floor(overall/20)+1.
"""
from __future__ import annotations

from .page import parse_link_header

CATEGORIES = (
    ("discoverability", "Discoverability", True),
    ("contentAccessibility", "Content accessibility", True),
    ("botAccessControl", "Bot access control", True),
    ("discovery", "Agent discovery", True),
    ("commerce", "Agentic commerce", False),
    ("execution", "Agent execution", False),
)
LEVEL_NAMES = {0: "Not Ready", 1: "Basic Web Presence", 3: "Agent-Readable", 5: "Agent-Native"}
LINK_RELS = {"sitemap", "alternate", "service-doc", "service-desc", "api-catalog"}
SEARCH_ONLY = {"Googlebot", "bingbot", "DuckDuckBot", "Applebot"}
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
AUTHORITY_CHECKS = ("oauthDiscovery", "oauthProtectedResource", "authMd")
API_CHECKS = ("apiCatalog",) + AUTHORITY_CHECKS


def keyless_reason(openapi_doc) -> str | None:
    """Why authority checks do not apply, when the OpenAPI document declares every operation keyless."""
    if not isinstance(openapi_doc, dict) or not isinstance(openapi_doc.get("paths"), dict):
        return None
    top = openapi_doc.get("security")
    operations = 0
    for item in openapi_doc["paths"].values():
        if not isinstance(item, dict):
            continue
        for method in HTTP_METHODS:
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            operations += 1
            security = op.get("security", top)
            if security not in (None, []) and not (isinstance(security, list) and all(s == {} for s in security)):
                return None
    if not operations:
        return None
    return (f"The site's OpenAPI document declares all {operations} operation(s) keyless (empty security), "
            "so OAuth metadata and auth.md do not apply.")


def _probe_status(probe: dict | None, missing: str, what: str) -> tuple[str, str]:
    if not probe:
        return "fail", missing
    if probe.get("ok"):
        return "pass", f"{what} found at {probe['url']}"
    if probe.get("error") or (probe.get("status") or 0) >= 500:
        return "unknown", f"{probe['url']} did not answer ({probe.get('error') or probe.get('status')}); check again later"
    if probe.get("note"):
        return "fail", f"{probe['url']}: {probe['note']}. {missing}"
    return "fail", f"{probe['url']} answered {probe.get('status')}. {missing}"


def checks(obs: dict, keyless: str | None = None) -> dict:
    """Every ReadinessCheck keyed by name; `keyless` is keyless_reason() of the site's OpenAPI document."""
    d, t, a = obs["discovery"], obs["terms"], obs["agent"]
    out: dict[str, dict] = {}

    def add(key, category, label, status, detail, scored=True, optional=False):
        out[key] = {"key": key, "category": category, "label": label, "status": status, "detail": detail,
                    "countInScore": scored, "optional": optional}

    add("robotsTxt", "discoverability", "Publish robots.txt",
        *_probe_status(d["robotsTxt"], "Serve /robots.txt as text/plain with your crawler rules.", "robots.txt"))
    sitemap = _probe_status(d["sitemapXml"], "Serve a sitemaps.org /sitemap.xml and declare it in robots.txt.", "A sitemap")
    if sitemap[0] != "pass" and (d.get("sitemapDeclared") or {}).get("ok"):
        sitemap = ("pass", f"robots.txt declares a valid sitemap at {d['sitemapDeclared']['url']}")
    add("sitemap", "discoverability", "Publish a sitemap", *sitemap)
    rels = {rel for link in parse_link_header(obs["headers"].get("link", ""), obs["finalUrl"]) for rel in link["rel"].split()}
    found = sorted(rels & LINK_RELS)
    add("linkHeaders", "discoverability", "Send discovery Link headers",
        "pass" if found else "fail",
        f"the page's Link header names {', '.join(found)}" if found else
        'Add a Link header to your home page, e.g. </sitemap.xml>; rel="sitemap", </.well-known/api-catalog>; rel="api-catalog".')
    aid = d["dnsAid"]
    add("dnsAid", "discoverability", "Publish DNS-AID records",
        "pass" if aid.get("found") else ("unknown" if not aid.get("ok") else "fail"),
        "SVCB records found under _agents." if aid.get("found") else
        (f"DNS lookups failed: {aid.get('error')}" if not aid.get("ok") else
         "Publish SVCB records at _mcp._agents.<host> (and _a2a, _index) pointing at your agent endpoints."))

    md = a["mdNegotiation"]
    if md.get("error"):
        negotiation = ("unknown", f"the request failed: {md['error']}")
    elif md["supported"] and not md.get("note"):
        negotiation = ("pass", "answers text/markdown when asked for it and not otherwise, with Vary: Accept")
    else:
        negotiation = ("fail", f"{md['note']}. Serve a Markdown version when Accept names text/markdown, "
                               "HTML otherwise, with Vary: Accept on both.")
    add("markdownNegotiation", "contentAccessibility", "Answer Accept: text/markdown", *negotiation)

    robots_state = "unknown" if t["robotsUnknown"] else ("present" if t["robotsPresent"] else "absent")
    named = sorted({row["ua"] for row in t["scoreboard"]
                    if row.get("matchedUa") not in (None, "*") and row["ua"] not in SEARCH_ONLY})
    add("robotsTxtAiRules", "botAccessControl", "Name AI crawlers in robots.txt",
        "pass" if named else ("unknown" if robots_state == "unknown" else "fail"),
        f"robots.txt has groups for {', '.join(named[:6])}" if named else
        ("robots.txt could not be read" if robots_state == "unknown" else
         "Add User-agent groups for the AI crawlers you mean to allow or block (GPTBot, ClaudeBot, ...)."))
    add("contentSignals", "botAccessControl", "Declare Content Signals",
        "pass" if t["signals"] else ("unknown" if robots_state == "unknown" else "fail"),
        "Content-Signal: " + t["signals"][0]["raw"].split(":", 1)[-1].strip() if t["signals"] else
        ("robots.txt could not be read" if robots_state == "unknown" else
         "Add a line such as Content-Signal: search=yes, ai-input=yes, ai-train=no to robots.txt."))
    add("webBotAuth", "botAccessControl", "Publish a Web Bot Auth key directory",
        *_probe_status(d["webBotAuth"], "If you run a bot, publish its keys at /.well-known/http-message-signatures-directory.",
                       "A key directory"))

    docs = {
        "apiCatalog": (d["apiCatalog"], "Publish /.well-known/api-catalog (RFC 9727) listing your APIs.", "An API catalog", "Publish an API catalog"),
        "oauthProtectedResource": (d["oauthProtectedResource"], "Publish /.well-known/oauth-protected-resource (RFC 9728).",
                                   "Protected-resource metadata", "Publish OAuth protected-resource metadata"),
        "authMd": (d["authMd"], "Publish /auth.md saying how agents authenticate.", "auth.md", "Publish auth.md"),
        "mcpServerCard": (d["mcpServerCard"], "Publish an MCP server card at /.well-known/mcp/server-card.json.",
                          "An MCP server card", "Publish an MCP server card"),
        "agentSkills": (d["agentSkills"], "Publish /.well-known/agent-skills/index.json.", "An agent skills index",
                        "Publish an agent skills index"),
    }
    for key in ("apiCatalog",):
        probe, missing, what, label = docs[key]
        add(key, "discovery", label, *_probe_status(probe, missing, what))
    oauth = d["oauthDiscovery"]
    either = oauth["oauthAuthorizationServer"] if oauth["oauthAuthorizationServer"].get("ok") else oauth["openidConfiguration"]
    add("oauthDiscovery", "discovery", "Publish OAuth discovery metadata",
        *_probe_status(either, "Publish /.well-known/oauth-authorization-server or openid-configuration.", "OAuth metadata"))
    for key in ("oauthProtectedResource", "authMd", "mcpServerCard", "agentSkills"):
        probe, missing, what, label = docs[key]
        add(key, "discovery", label, *_probe_status(probe, missing, what))
    wm = a["webmcp"]
    add("webMcp", "discovery", "Expose tools with WebMCP", "pass" if wm["found"] else "fail",
        f"WebMCP {wm['kind']} marker: {wm.get('marker')}" if wm["found"] else
        "Register page tools with navigator.modelContext so in-browser agents can act.")
    card = a["agentCard"]
    add("a2aAgentCard", "discovery", "Publish an A2A agent card",
        "pass" if card.get("present") else ("unknown" if card.get("unknown") else "fail"),
        card.get("detail") or card.get("note") or "Publish /.well-known/agent-card.json.", scored=False, optional=True)

    for key, probe, label in (("ucp", d["commerce"]["ucp"], "UCP profile"), ("acp", d["commerce"]["acp"], "ACP profile"),
                              ("ap2", d["commerce"]["ap2"], "AP2 profile")):
        add(key, "commerce", label, *_probe_status(probe, "Only for sites that sell to agents.", label), scored=False, optional=True)
    x402 = t["paid"].get("x402")
    add("x402", "commerce", "x402 payments", "pass" if x402 else "fail",
        "the page answers 402 with an x402 payment requirement" if x402 else "No x402 payment requirement seen.",
        scored=False, optional=True)
    add("mpp", "commerce", "Machine payments", "neutral", "Not probed yet.", scored=False, optional=True)
    for key, label in (("agentScripts", "Agent-usable scripts"), ("agentMedia", "Agent-usable media")):
        add(key, "execution", label, "neutral", "Needs a rendered page; not measured by this scan.", scored=False, optional=True)

    if keyless:
        for key in AUTHORITY_CHECKS:
            out[key].update(status="neutral", notApplicable=True, detail=keyless)
    elif not _offers_api(obs):
        for key in API_CHECKS:
            if out[key]["status"] != "pass":
                out[key].update(status="neutral", detail="No API, MCP server or agent card found: this check applies to sites that offer one.")
    return out


def _offers_api(obs: dict) -> bool:
    a, d = obs["agent"], obs["discovery"]
    return (a["mcp"]["verdict"] in ("yes", "likely", "maybe") or a["nlweb"]["verdict"] in ("likely", "maybe")
            or a["openapi"].get("present") or a["agentCard"].get("present") or a["aiPlugin"].get("present")
            or d["apiCatalog"].get("ok") or d["mcpServerCard"].get("ok"))


def level(found: dict, overall: int, agent_native: bool) -> tuple[int, str | None]:
    if agent_native:
        ladder = 5
    elif all(found[k]["status"] == "pass" for k in ("markdownNegotiation", "contentSignals", "linkHeaders")):
        ladder = 3
    elif found["robotsTxt"]["status"] == "pass" or found["sitemap"]["status"] == "pass":
        ladder = 1
    else:
        ladder = 0
    ceiling = max(r for r in (0, 1, 3, 5) if r <= overall // 20 + 1)
    if ladder > ceiling:
        return ceiling, f"Capped at level {ceiling}: the checks qualify for level {ladder}, but an overall score of {overall} allows at most {ceiling}."
    return ladder, None


def field_score(obs: dict, bot_views: list[dict] | None) -> dict:
    components = []
    status = obs.get("status") or 0
    readable = 200 <= status < 400 and not obs.get("bodyUnreadable")
    components.append({"key": "identifiedFetch", "label": "Our identified fetch got a readable answer",
                       "score": 100 if readable else 0, "detail": f"status {status}"})
    crawlers = [v for v in bot_views or [] if v["role"] != "control"]
    controls_ok = any(v["role"] == "control" and not v["blocked"] and v["status"] for v in bot_views or [])
    if crawlers and all(v["status"] is not None for v in crawlers) and controls_ok:
        let_through = sum(1 for v in crawlers if not v["blocked"])
        components.append({"key": "sampledBots", "label": "Sampled crawlers let through",
                           "score": round(100 * let_through / len(crawlers)),
                           "detail": f"{let_through} of {len(crawlers)} crawlers not blocked"})
    else:
        components.append({"key": "sampledBots", "label": "Sampled crawlers let through", "score": None,
                           "detail": "bot views did not run" if not bot_views else "not every crawler view answered, or no control got through"})
    words = (obs.get("anatomy") or {}).get("wordCount") or 0
    components.append({"key": "usableBody", "label": "A body with words in it", "score": 100 if words >= 40 else (50 if words else 0),
                       "detail": f"{words} words"})
    strategy = obs["agent"]["strategy"]
    door = {"agent-native": 100, "agent-readable": 60}.get(strategy["verdict"], 0)
    if strategy["verdict"] == "human-only" and strategy["unknowns"]:
        door = None
    components.append({"key": "agentDoor", "label": "A door for agents", "score": door, "detail": strategy["verdict"]})
    scores = [c["score"] for c in components]
    overall = None if any(s is None for s in scores) else round(sum(scores) / len(scores))
    return {"overall": overall, "scoringNote": "The mean of four components; null when any of them could not be measured.",
            "components": components}


def readiness(obs: dict, keyless: str | None = None, bot_views: list[dict] | None = None) -> dict:
    """The readiness object; `keyless` is keyless_reason() of the site's OpenAPI document."""
    found = checks(obs, keyless)
    categories, counted, passed = [], 0, 0
    for key, label, in_score in CATEGORIES:
        mine = [c for c in found.values() if c["category"] == key]
        scored = [c for c in mine if c["countInScore"] and c["status"] != "neutral"]
        wins = sum(1 for c in scored if c["status"] == "pass")
        if in_score:
            counted += len(scored)
            passed += wins
        categories.append({"key": key, "label": label, "score": round(100 * wins / len(scored)) if scored else 0,
                           "passed": wins, "total": len(scored), "checkCount": len(mine), "countInScore": in_score})
    overall = round(100 * passed / counted) if counted else 0
    rung, note = level(found, overall, obs["agent"]["strategy"]["verdict"] == "agent-native")
    failed = [c for c in found.values() if c["countInScore"] and c["status"] == "fail"]
    return {
        "overall": overall, "level": rung, "levelName": LEVEL_NAMES[rung], "levelNote": note,
        "categories": categories, "checks": found, "counted": counted, "passed": passed, "keyless": keyless,
        "scoringNote": "passes / (pass + fail + unknown) over scored checks; neutral checks do not count.",
        "nextActions": [{"key": c["key"], "label": c["label"]} for c in failed[:5]],
        "botViews": bot_views or [],
        "field": field_score(obs, bot_views),
    }
