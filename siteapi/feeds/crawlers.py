"""The one registry of AI and search crawlers: robots product tokens, User-Agent substrings, roles.

The ledger identifies visits with `match_user_agent`; the lens robots scoreboard asks robots.txt
about each `token`. Order matters: matching is a case-insensitive substring test and the first
hit wins, so the specific agents (OAI-SearchBot, ChatGPT-User) come before the general ones
(GPTBot). Entries without `ua_substring` are robots-only control tokens that never send requests.
Roles: `search` for web search engines, `train` for training crawlers, `answers` for what AI answer
engines fetch or index to answer with (REFERENCE §2 puts OAI-SearchBot and PerplexityBot there).
"""
from __future__ import annotations

PRODUCT_TOKEN = "AadharshBot"  # this site's own bot, as robots.txt names it
PRODUCT_USER_AGENT = f"{PRODUCT_TOKEN}/1.0 (+https://aadhar.sh/bot)"

CRAWLERS: tuple[dict, ...] = (
    {"key": "oai-searchbot", "token": "OAI-SearchBot", "ua_substring": "oai-searchbot", "owner": "OpenAI",
     "kind": "AI search indexer", "role": "answers", "label": "OpenAI SearchBot"},
    {"key": "chatgpt-user", "token": "ChatGPT-User", "ua_substring": "chatgpt-user", "owner": "OpenAI",
     "kind": "AI assistant fetch", "role": "answers", "label": "ChatGPT user fetch"},
    {"key": "gptbot", "token": "GPTBot", "ua_substring": "gptbot", "owner": "OpenAI",
     "kind": "AI training crawler", "role": "train", "label": "GPTBot"},
    {"key": "claude-searchbot", "token": "Claude-SearchBot", "ua_substring": "claude-searchbot", "owner": "Anthropic",
     "kind": "AI search indexer", "role": "answers", "label": "Claude SearchBot"},
    {"key": "claude-user", "token": "Claude-User", "ua_substring": "claude-user", "owner": "Anthropic",
     "kind": "AI assistant fetch", "role": "answers", "label": "Claude user fetch"},
    {"key": "claudebot", "token": "ClaudeBot", "ua_substring": "claudebot", "owner": "Anthropic",
     "kind": "AI training crawler", "role": "train", "label": "ClaudeBot"},
    {"key": "perplexity-user", "token": "Perplexity-User", "ua_substring": "perplexity-user", "owner": "Perplexity",
     "kind": "AI assistant fetch", "role": "answers", "label": "Perplexity user fetch"},
    {"key": "perplexitybot", "token": "PerplexityBot", "ua_substring": "perplexitybot", "owner": "Perplexity",
     "kind": "AI search indexer", "role": "answers", "label": "PerplexityBot"},
    {"key": "ccbot", "token": "CCBot", "ua_substring": "ccbot", "owner": "Common Crawl",
     "kind": "open web dataset", "role": "train", "label": "Common Crawl"},
    {"key": "bytespider", "token": "Bytespider", "ua_substring": "bytespider", "owner": "ByteDance",
     "kind": "AI training crawler", "role": "train", "label": "Bytespider"},
    {"key": "amazonbot", "token": "Amazonbot", "ua_substring": "amazonbot", "owner": "Amazon",
     "kind": "AI training crawler", "role": "train", "label": "Amazonbot"},
    {"key": "meta-externalagent", "token": "meta-externalagent", "ua_substring": "meta-externalagent", "owner": "Meta",
     "kind": "AI training crawler", "role": "train", "label": "Meta external agent"},
    {"key": "applebot", "token": "Applebot", "ua_substring": "applebot", "owner": "Apple",
     "kind": "search engine crawler", "role": "search", "label": "Applebot"},
    {"key": "googlebot", "token": "Googlebot", "ua_substring": "googlebot", "owner": "Google",
     "kind": "search engine crawler", "role": "search", "label": "Googlebot"},
    {"key": "bingbot", "token": "bingbot", "ua_substring": "bingbot", "owner": "Microsoft",
     "kind": "search engine crawler", "role": "search", "label": "Bingbot"},
    {"key": "duckduckbot", "token": "DuckDuckBot", "ua_substring": "duckduckbot", "owner": "DuckDuckGo",
     "kind": "search engine crawler", "role": "search", "label": "DuckDuckBot"},
    {"key": "google-extended", "token": "Google-Extended", "ua_substring": None, "owner": "Google",
     "kind": "AI training control token", "role": "train", "label": "Google-Extended"},
    {"key": "applebot-extended", "token": "Applebot-Extended", "ua_substring": None, "owner": "Apple",
     "kind": "AI training control token", "role": "train", "label": "Applebot-Extended"},
    {"key": "aadharshbot", "token": PRODUCT_TOKEN, "ua_substring": PRODUCT_TOKEN.lower(), "owner": "aadhar.sh",
     "kind": "this site's own fetcher", "role": "answers", "label": "AadharshBot", "ledger": False},
)

BY_KEY = {entry["key"]: entry for entry in CRAWLERS}


def match_user_agent(user_agent: str | None) -> dict | None:
    """The first registry entry whose substring occurs in `user_agent` (any case), or None."""
    lowered = (user_agent or "").lower()
    if not lowered:
        return None
    for entry in CRAWLERS:
        if entry["ua_substring"] and entry["ua_substring"] in lowered:
            return entry
    return None


def counts_in_ledger(entry: dict | None) -> bool:
    return bool(entry) and entry.get("ledger", True)
