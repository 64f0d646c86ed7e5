"""Bot views: the page fetched as ~10 user agents, and a local model's read of whether it is a wall.

Roles and owners come from the one crawler registry (`siteapi.feeds.crawlers`); this module
only adds the full User-Agent strings those crawlers send. `blocked` is a challenge or a status of
401, 403, 406, 429 or 451; `challenge` comes from the `cf-mitigated: challenge` header and the
interstitial pages of the big bot-management vendors (their page shapes, never a vendor name in
some other header). `wall` embeds the sample with the /ask model (MiniLM-L6-v2) and compares it
with labelled wall and not-wall exemplars shipped here: p = sigmoid((best wall cosine - best
not-wall cosine) / WALL_TEMPERATURE).
"""
from __future__ import annotations

import math
import re
import threading

from selectolax.lexbor import LexborHTMLParser

from ..feeds.crawlers import BY_KEY
from .discovery import CapReached, Subrequests
from .fetch import CHROME_UA, FetchFailed, FetchRefused
from .page import document_title, is_binary, mime_of, visible_words
from .terms import BLOCKING_STATUSES

SAMPLE_BYTES = 2 * 1024  # interstitials name themselves early: title, challenge script, cf-mitigated header
# (key, label, role, registry key or None, User-Agent)
VIEWS = (
    ("chrome", "Chrome (control)", "control", None, CHROME_UA),
    ("curl", "curl (control)", "control", None, "curl/8.7.1"),
    ("googlebot", "Googlebot", "search", "googlebot",
     "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"),
    ("gptbot", "GPTBot", "train", "gptbot",
     "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; +https://openai.com/gptbot)"),
    ("claudebot", "ClaudeBot", "train", "claudebot",
     "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; ClaudeBot/1.0; +claudebot@anthropic.com)"),
    ("ccbot", "CCBot", "train", "ccbot", "CCBot/2.0 (https://commoncrawl.org/faq/)"),
    ("google-extended", "Google-Extended", "train", "google-extended",
     "Mozilla/5.0 (compatible; Google-Extended; +https://developers.google.com/search/docs/crawling-indexing/google-common-crawlers)"),
    ("perplexitybot", "PerplexityBot", "answers", "perplexitybot",
     "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; PerplexityBot/1.0; +https://perplexity.ai/perplexitybot)"),
    ("chatgpt-user", "ChatGPT-User", "answers", "chatgpt-user",
     "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko); compatible; ChatGPT-User/1.0; +https://openai.com/bot"),
    ("claude-user", "Claude-User", "answers", "claude-user",
     "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; Claude-User/1.0; +Claude-User@anthropic.com)"),
)

# Interstitial shapes: markers that appear in the challenge pages themselves.
CHALLENGE_MARKERS = (
    re.compile(rb"/cdn-cgi/challenge-platform/", re.I),
    re.compile(rb"<title>\s*just a moment\.\.\.\s*</title>", re.I),
    re.compile(rb"window\._cf_chl_opt", re.I),
    re.compile(rb"_Incapsula_Resource", re.I),
    re.compile(rb"geo\.captcha-delivery\.com|ct\.captcha-delivery\.com", re.I),   # DataDome
    re.compile(rb"px-captcha|/_px/", re.I),                                       # HUMAN (PerimeterX)
    # AWS WAF: its challenge.js is served from *.token.awswaf.com; a script named challenge.js alone is no sign
    re.compile(rb"awswaf|aws-waf-token", re.I),
    re.compile(rb"<title>\s*(attention required|access denied|checking your browser)", re.I),
)


def is_challenge(headers: dict, body: bytes) -> bool:
    if (headers.get("cf-mitigated") or "").strip().lower() == "challenge":
        return True
    head = body[:SAMPLE_BYTES]
    return any(marker.search(head) for marker in CHALLENGE_MARKERS)


def sample_text(body: bytes, content_type: str) -> str:
    if not body or is_binary(body, content_type):
        return ""
    text = body.decode("utf-8", errors="replace")
    if "html" in mime_of(content_type) or text.lstrip()[:1] == "<":
        tree = LexborHTMLParser(text)
        title = document_title(tree)
        text = (title.text() if title else "") + " " + " ".join(visible_words(tree))
    return " ".join(text.split())[:1200]


def view(sub: Subrequests, url: str, spec: tuple) -> tuple[dict, str]:
    """One BotView, and the sample text the wall model reads."""
    key, label, role, registry_key, user_agent = spec
    row = {"key": key, "label": label, "role": role, "userAgent": user_agent, "status": None,
           "blocked": False, "challenge": False}
    if registry_key:
        row["owner"] = BY_KEY[registry_key]["owner"]
    try:
        result = sub.fetch(url, {"User-Agent": user_agent}, cap_bytes=SAMPLE_BYTES, timeout_s=4.5)
    except (FetchFailed, FetchRefused, CapReached) as failed:
        row["error"] = str(failed)
        return row, ""
    challenge = is_challenge(result.headers, result.body)
    row.update(status=result.status, contentType=result.content_type, sampleBytes=len(result.body),
               redirected=result.redirected, challenge=challenge,
               blocked=challenge or result.status in BLOCKING_STATUSES)
    return row, sample_text(result.body, result.content_type)


# --- the wall model ---------------------------------------------------------------------------

WALL_EXEMPLARS = (
    "Just a moment... Checking if the site connection is secure. Enable JavaScript and cookies to continue.",
    "Access denied. You do not have permission to access this page on this server. Reference number 18.4f2.",
    "Please verify you are a human. Press and hold the button to confirm you are not a robot.",
    "Attention Required! Sorry, you have been blocked. This website is using a security service to protect itself.",
    "Request blocked. Automated access to this site is not allowed. Contact the site owner if you believe this is an error.",
    "403 Forbidden. Bots and crawlers are not permitted. Your request has been denied.",
    "Too many requests. You have been rate limited. Please try again later.",
    "Payment required. Crawling this content requires a paid license. Send a crawler-exact-price header to pay.",
    "Pardon our interruption. As you were browsing something about your browser made us think you were a bot.",
    "Verifying your browser before accessing the website. This process is automatic. You will be redirected shortly.",
)
NOT_WALL_EXEMPLARS = (
    "Welcome to our store. Shop the new collection of shoes, shirts and jackets with free shipping over fifty dollars.",
    "Notes on building a small sourdough starter: flour, water, patience, and a warm kitchen corner.",
    "Documentation: install the package, configure the client with your settings file, then call the search endpoint.",
    "About me. I am a software engineer in New York writing about photography, cars and the open web.",
    "Breaking news: city council approves new budget for parks and public transport after a long debate.",
    "Recipe: roast the vegetables at 220 degrees for thirty minutes, season with salt, pepper and olive oil.",
    "Our company builds payments infrastructure for the internet. Read the docs, see pricing, or contact sales.",
    "Page not found. The page you are looking for might have been moved. Go back to the home page or search the site.",
    "Sign in to your account or create one to continue. Forgot your password? Reset it here.",
    "Chapter one. It was a bright cold day in April, and the clocks were striking thirteen.",
)
WALL_TEMPERATURE = 0.04

_exemplars: dict[int, tuple] = {}
_exemplar_lock = threading.Lock()


def _exemplar_vectors(model):
    with _exemplar_lock:
        cached = _exemplars.get(id(model))
        if cached is None:
            walls = model.embed(list(WALL_EXEMPLARS))
            others = model.embed(list(NOT_WALL_EXEMPLARS))
            cached = _exemplars[id(model)] = (walls, others)
        return cached


def model_name() -> str:
    from .. import ranker
    return f"{ranker.MODEL_NAME} nearest-exemplar ({len(WALL_EXEMPLARS)} wall / {len(NOT_WALL_EXEMPLARS)} not-wall)"


def wall_check(rows: list[tuple[dict, str]], settings) -> str:
    """Adds `wall` to every row with a sample; returns the phases.wallCheck value."""
    sampled = [(row, text) for row, text in rows if text]
    if not sampled:
        return "none"
    name = model_name()
    try:
        from .. import ranker
        model = ranker.model_for(settings)
        if model is None:
            raise RuntimeError("the embedding model could not be loaded")
        walls, others = _exemplar_vectors(model)
        vectors = model.embed([text for _, text in sampled])
    except Exception as exc:  # onnxruntime/tokenizers raise their own types; the scan goes on
        error = str(exc)[:200] or type(exc).__name__
        for row, _ in sampled:
            row["wall"] = {"p": None, "model": name, "error": error}
        return error
    for (row, _), vector in zip(sampled, vectors):
        margin = float((walls @ vector).max() - (others @ vector).max())
        row["wall"] = {"p": round(1 / (1 + math.exp(-margin / WALL_TEMPERATURE)), 3), "model": name}
    return "ok"
