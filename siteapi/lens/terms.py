"""Terms: what the target says AI crawlers may do, and how strongly it says it.

The robots scoreboard asks Google's own parser (fast-robotstxt) about every crawler of the one
registry (`siteapi.feeds.crawlers`), with the product token, never a full UA string: the most
specific group wins and replaces `*`, then the longest path, Allow on a tie. Any 2xx robots.txt
that is text is read, whatever its Content-Type, and lines that are not rules are ignored (RFC
9309), so a file without rules allows everything, as a 4xx does; 5xx, unreachable or a binary body
leaves every verdict `unknown`. The rules are the asked origin's: after a redirect to another origin
they are read for the asked URL, not the final one.
Google's matcher tracks every path position a `*` may have stopped at, so a wildcard rule costs it
up to one step per character per path position: the scoreboard asks it once per group of crawlers
that read the same rules, within MATCH_WORK steps, and answers `unknown` past them.
Beside it: Content-Signal lines, pay-per-crawl and x402, enforcement seen by our own fetch,
noai directives, W3C TDMRep, and the spectrum tier (open < signaled < enforced < paid).
"""
from __future__ import annotations

import json
import re
from urllib.parse import urlsplit, urlunsplit

from robotstxt import RobotsMatcher

from ..feeds.crawlers import CRAWLERS

BLOCKING_STATUSES = (401, 403, 406, 429, 451)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_ROBOTS_KEY = re.compile(r"[A-Za-z][A-Za-z _-]*")
# Google's parser reads keys by prefix and forgives the common typos of these two
_USER_AGENT_KEYS = ("user-agent", "useragent", "user agent")
_RULE_KEYS = ("allow", "disallow", "dissallow", "dissalow", "disalow", "diasllow", "disallaw")
_PRODUCT_TOKEN = re.compile(r"[A-Za-z_-]*")
TIERS = ("open", "signaled", "enforced", "paid")
SIGNALS = 50
AGENT_CHARS = 200  # a user-agent value as shown; the rule beside it is cut at 300
# About a tenth of a second of the matcher: enough for 10,000 characters of wildcard rules, read
# for every crawler each named in a group of its own, against a path of 1,000 characters
MATCH_WORK = 200_000_000
_ASCII = bytes(range(128))


def robots_state(status: int | None, unreachable: bool, text: str | None) -> tuple[str, str | None]:
    """('present' | 'absent' | 'unknown', why unknown) for a robots.txt fetch outcome."""
    if unreachable or status is None:
        return "unknown", "robots.txt could not be fetched"
    if 400 <= status < 500:
        return "absent", None
    if status >= 500:
        return "unknown", f"robots.txt answered {status}; a server error means crawlers must assume nothing"
    if not 200 <= status < 300:
        return "unknown", f"robots.txt answered {status}"
    if text is None:
        return "unknown", ("robots.txt answered a body that cannot be read as text (binary, or in a content coding "
                           "that could not be decoded), so its rules cannot be read")
    return "present", None


def robots_field(line: str) -> tuple[str, str] | None:
    """(key as written, value) of a `key: value` line, the value without its comment; None for a
    line that is not one. Read with partition and strip, never a regex that could backtrack over
    a long line: robots.txt comes from the site and may be 512 KiB of spaces."""
    key, colon, rest = line.partition(":")
    key = key.strip()
    if not colon or not _ROBOTS_KEY.fullmatch(key):
        return None
    return key, rest.partition("#")[0].strip()


def _group_names(lines: list[str], line_numbers: set[int]) -> dict[int, dict[str, str]]:
    """For each line in `line_numbers` (1-based): the user-agent values of the group it belongs
    to, keyed by their product token in lower case (the first value naming a token wins).

    As in Google's parser, only an Allow or Disallow line ends a group's run of user-agent lines;
    blank lines, comments and other fields between them do not. Google's parser names a crawler
    only by its whole product token (the leading run of letters, `_` and `-`), case-insensitively:
    `Applebot` does not name `Applebot-Extended`. One pass over the file serves every line asked
    for, and each group is read once however many crawlers matched in it."""
    runs: dict[int, tuple[list[str], int]] = {}  # line -> (its group's user agents, how many came by then)
    agents: list[str] = []
    after_rule = True
    for number, line in enumerate(lines[:max(line_numbers, default=0)], 1):
        field = robots_field(line)
        key = field[0].lower() if field else ""
        if key.startswith(_USER_AGENT_KEYS):
            if after_rule:
                agents = []
            agents.append(field[1])
            after_rule = False
        elif key.startswith(_RULE_KEYS):
            after_rule = True
        if number in line_numbers:
            runs[number] = (agents, len(agents))
    names: dict[tuple[int, int], dict[str, str]] = {}
    out = {}
    for number in line_numbers:
        group, size = runs.get(number, (agents, len(agents)))  # past the end: the last group
        if (id(group), size) not in names:
            named = names[(id(group), size)] = {}
            for agent in group[:size]:
                named.setdefault(_PRODUCT_TOKEN.match(agent).group(0).lower(), agent)
        out[number] = names[(id(group), size)]
    return out


def rules_url(robots_origin: str, asked_url: str, final_url: str) -> tuple[str, str | None]:
    """The URL a robots.txt read at `robots_origin` speaks for, and a note when it is not the page's.

    Rules belong to the origin that serves them: after a redirect to another origin they are read
    for the asked URL, since nothing was read from the origin that answered."""
    if _origin(final_url) == _origin(robots_origin):
        return final_url, None
    return asked_url, (f"robots.txt of {_origin_text(robots_origin)} read for the asked URL: "
                       f"the page redirected to {_origin_text(final_url)}, another origin")


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)


def _origin_text(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def robots_lines(text: str) -> list[str]:
    """robots.txt's lines as Google's parser numbers them (its matching_line): broken at \r\n, \r
    and \n only, where str.splitlines() also breaks at form feeds and other separators."""
    return _LINE_BREAK.split(text)


def rule_at(lines: list[str], number: int) -> str | None:
    """The rule on line `number` (1-based, as matching_line counts), stripped and capped."""
    return lines[number - 1].strip()[:300] if 0 < number <= len(lines) else None


def scoreboard(robots_text: str | None, state: str, page_url: str, note: str | None = None,
               caveat: str | None = None) -> list[dict]:
    """One verdict per registry crawler for `page_url`'s path; `caveat` is added to every note of
    a read robots.txt (or of a 4xx one)."""
    rows, named_at = [], []
    path_url = page_url if urlsplit(page_url).path else page_url + "/"
    lines = robots_lines(robots_text or "")
    answers, too_costly = _answers(robots_text or "", lines, path_url) if state == "present" else ({}, None)
    for crawler in CRAWLERS:
        row = {"ua": crawler["token"], "owner": crawler["owner"], "kind": crawler["kind"], "role": crawler["role"],
               "verdict": "unknown", "matchedUa": None, "rule": None}
        if state == "absent":
            row.update(verdict="allow", note="no robots.txt (4xx): everything is allowed")
        elif too_costly:
            row["note"] = too_costly
        elif state == "present":
            allowed, line, named = answers[crawler["token"]]
            row["verdict"] = "allow" if allowed else "block"
            if line:
                row["rule"] = rule_at(lines, line)
                # a group naming the crawler replaces `*`, so a matched line is in one or the other
                row["matchedUa"] = "*"
                if named:
                    named_at.append((row, line))
            elif named:
                row["matchedUa"] = crawler["token"]
                row["note"] = "named in robots.txt; no rule matches this path"
            else:
                row["note"] = "no rule matches this path"
        else:
            row["note"] = note or "robots.txt unreadable"
        if caveat and state != "unknown":
            row["note"] = f"{row['note']}; {caveat}" if row.get("note") else caveat
        rows.append(row)
    groups = _group_names(lines, {line for _, line in named_at})
    for row, line in named_at:
        row["matchedUa"] = groups[line].get(row["ua"].lower(), row["ua"])[:AGENT_CHARS]
    return rows


def _answers(robots_text: str, lines: list[str], path_url: str) -> tuple[dict[str, tuple[bool, int, bool]], str | None]:
    """Google's (allowed, matching line, crawler named) per registry token for `path_url`, or why
    robots.txt was not matched: its wildcard rules would take the matcher past MATCH_WORK steps.

    Crawlers that no group names all read the `*` groups alone, so one question answers for all of
    them. Which ones are named is asked of the parser with the root path, against which no rule
    costs more than its length."""
    root = urlunsplit(urlsplit(path_url)[:2] + ("/", "", ""))
    keys = {c["token"]: c["token"] if _ask(robots_text, c["token"], root)[2] else "*" for c in CRAWLERS}
    wildcard = "".join(line[line.index("*"):] for line in lines if "*" in line).encode()
    escaped = len(wildcard) + 2 * len(wildcard.translate(None, _ASCII))  # the matcher reads non-ASCII as %XX
    if len(set(keys.values())) * escaped * (len(path_url) + 1) > MATCH_WORK:
        return {}, (f"not matched: robots.txt's {escaped:,} characters of wildcard (*) rules against a path "
                    f"this long ({len(path_url):,} characters) are past what the lens matches")
    asked = {}
    for token, key in keys.items():
        if key not in asked:
            asked[key] = _ask(robots_text, token, path_url)
    return {token: asked[key] for token, key in keys.items()}, None


def _ask(robots_text: str, token: str, url: str) -> tuple[bool, int, bool]:
    matcher = RobotsMatcher()  # the matcher keeps state between calls; one per question
    allowed = matcher.is_allowed(robots_text, token, url)
    return allowed, matcher.matching_line, matcher.ever_seen_specific_agent


def content_signals(robots_text: str | None) -> list[dict]:
    """The first SIGNALS Content-Signal lines, each with (the first SIGNALS of) the user agents of
    the group it sits in: one group of thousands, repeated in every signal, would multiply the file."""
    out, agents, in_agents = [], ["*"], False
    for line in robots_lines(robots_text or ""):
        field = robots_field(line)
        if not field:
            continue
        key, value = field[0].lower(), field[1]
        if key.startswith(_USER_AGENT_KEYS):
            if not in_agents:
                agents = []
            agents.append(value)
            in_agents = True
            continue
        in_agents = False
        if key == "content-signal" and len(out) < SIGNALS:
            parsed = {}
            for part in value.split(","):
                name, _, setting = part.partition("=")
                if name.strip():
                    parsed[name.strip().lower()] = setting.strip().lower()
            out.append({"agents": [agent[:AGENT_CHARS] for agent in agents[:SIGNALS]], "raw": line.strip()[:500],
                        "parsed": parsed})
    return out


def paid(status: int, headers: dict, body: bytes) -> dict:
    crawler_headers = {k: v for k, v in headers.items() if k.startswith("crawler-")}
    x402 = None
    if status == 402:
        try:
            data = json.loads(body[:64 * 1024].decode("utf-8", errors="replace"))
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, dict) and "x402Version" in data:
            x402 = json.dumps(data)[:2000]
    return {"http402": status == 402, "crawlerHeaders": crawler_headers, "x402": x402}


def directives(ai: dict) -> dict:
    found = (ai or {}).get("directives") or {}
    meta, header = found.get("metaRobots"), found.get("xRobotsTag")
    words = re.split(r"[\s,:;]+", f"{meta or ''} {header or ''}".lower())
    return {"metaRobots": meta, "xRobotsTag": header, "noai": "noai" in words or "noimageai" in words}


def tdmrep_file(data, probe: dict) -> dict | None:
    """What the well-known TDMRep file says, from its parsed JSON `data` and its `probe`; None when
    there is no such file (`data` is not a JSON array)."""
    if not isinstance(data, list):
        return None
    rules = [r for r in data if isinstance(r, dict)]
    first = rules[0] if rules else {}
    reserved = any(str(r.get("tdm-reservation")) == "1" for r in rules) if rules else None
    return {"present": True, "rules": len(rules), "reserved": reserved, "location": _string(first.get("location")),
            "policy": _string(first.get("tdm-policy")), "body": probe.get("body")}


def tdmrep(found_file: dict | None, probe: dict, headers: dict, meta: dict) -> dict:
    """W3C TDMRep from the well-known file (`tdmrep_file`), else the `tdm-reservation` header or meta tag."""
    if found_file:
        return found_file
    header = headers.get("tdm-reservation") or (meta or {}).get("tdm-reservation")
    out = {"present": header is not None, "rules": 0, "reserved": None if header is None else header.strip() == "1",
           "location": None, "policy": (headers.get("tdm-policy") or (meta or {}).get("tdm-policy"))}
    if probe.get("note"):
        out["invalid"] = probe["note"]
    return out


def _string(value) -> str | None:
    return value if isinstance(value, str) else None


def spectrum(board: list[dict], state: str, signals: list[dict], paid_terms: dict, enforcement: dict,
             found_directives: dict, tdm: dict) -> dict:
    """The strongest tier found, with every reason for it and for the tiers below."""
    reasons: dict[str, list[str]] = {tier: [] for tier in TIERS}
    if paid_terms["http402"]:
        reasons["paid"].append("the page answered 402 Payment Required")
    if paid_terms["crawlerHeaders"]:
        reasons["paid"].append("pay-per-crawl headers: " + ", ".join(sorted(paid_terms["crawlerHeaders"])))
    if enforcement["challenged"]:
        reasons["enforced"].append("our identified fetch was challenged")
    elif enforcement["status"] in (401, 403, 451):
        reasons["enforced"].append(f"our identified fetch got {enforcement['status']}")
    blocked = [row["ua"] for row in board if row["verdict"] == "block"]
    if blocked:
        reasons["signaled"].append("robots.txt blocks " + ", ".join(blocked[:6]) + ("…" if len(blocked) > 6 else ""))
    denied = sorted({f"{k}={v}" for s in signals for k, v in s["parsed"].items() if v and v != "yes"})
    if denied:
        reasons["signaled"].append("Content-Signal " + ", ".join(denied))
    if found_directives["noai"]:
        reasons["signaled"].append("noai / noimageai directive")
    if tdm.get("present") and tdm.get("reserved") is True:  # an empty file ([]) reserves nothing
        reasons["signaled"].append("TDMRep reserves text and data mining rights")
    for tier in reversed(TIERS[1:]):
        if reasons[tier]:
            return {"tier": tier, "reasons": reasons[tier] + [r for t in TIERS[1:TIERS.index(tier)] for r in reasons[t]]}
    if state == "unknown":
        why = "robots.txt unreadable, nothing else found"
    elif state == "absent":
        why = "no robots.txt: everything allowed"
    elif signals:
        why = "crawlers allowed and every Content-Signal is yes"
    else:
        why = "every named crawler is allowed"
    return {"tier": "open", "reasons": [why]}
