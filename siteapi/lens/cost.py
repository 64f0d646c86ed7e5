"""Token cost of a page: real o200k_base token counts per tier, priced with the configured rates.

Token counts come from siteapi.tokens (the vocabulary shipped in models/, never downloaded).
"""
from __future__ import annotations

import logging

from ..config import SettingsError
from ..tokens import NAME as TOKENIZER
from ..tokens import VocabularyError, encoding
from ..tokens import count as count_tokens
from .page import Page

# Used when site.toml has no [lens] rates (list prices per million input tokens).
DEFAULT_RATES = [
    {"model": "Claude Sonnet 5", "usdPerMtok": 3.0},
    {"model": "Claude Haiku 4.5", "usdPerMtok": 1.0},
    {"model": "GPT-5.6 Luna", "usdPerMtok": 0.2},
]
DEFAULT_CHECKED = "2026-11-21"

TIERS = {
    "html": ("HTML", "The page's markup as parsed (up to the parse cap)."),
    "text": ("Visible text", "Text only: no markup, scripts or styles."),
    "markdown": ("Markdown", "The page converted to Markdown (html-to-markdown)."),
    "outline": ("Outline", "Headings only."),
    "raw": ("Raw response", "The whole response body as received, decoded."),
}

log = logging.getLogger(__name__)


def rates(conf: dict) -> tuple[list[dict], str]:
    """(rates, checked date) from the [lens] settings, the defaults when none are set."""
    configured, checked = conf.get("rates"), conf.get("rates_checked")
    out = []
    for item in configured or []:
        model, price = (item.get("model"), item.get("usdPerMtok")) if isinstance(item, dict) else (None, None)
        if not (isinstance(model, str) and model.strip() and isinstance(price, (int, float))
                and not isinstance(price, bool) and 0 <= price < float("inf")):
            raise SettingsError(f"Setting [lens] rates lists {item!r}; list tables such as "
                                '{ model = "Claude Sonnet 5", usdPerMtok = 3.0 } (US dollars per million tokens).')
        out.append({"model": model.strip(), "usdPerMtok": float(price)})
    if not out:
        return [dict(r) for r in DEFAULT_RATES], DEFAULT_CHECKED
    return out, str(checked) if checked else DEFAULT_CHECKED


def price(page: Page | None, conf: dict) -> dict | None:
    """The `cost` object, or None when nothing can be priced (binary, unreadable, empty)."""
    if page is None or page.binary or not any(page.strings.values()):
        return None
    try:
        encoding()
    except VocabularyError as exc:
        log.error("%s", exc)
        return None
    tiers, counted = [], {}
    for key, (label, note) in TIERS.items():
        if key not in page.strings:
            continue
        text = page.strings[key]
        if id(text) not in counted:  # raw is the parsed HTML itself when nothing was cut
            counted[id(text)] = count_tokens(text)
        tiers.append({"key": key, "label": label, "note": note, "chars": len(text), "tokens": counted[id(text)]})
    rate_list, checked = rates(conf)
    cost = {"tokenizer": TOKENIZER, "checked": checked, "rates": rate_list, "tiers": tiers}
    if page.parse_truncated:
        cost["partial"] = {"parsedBytes": page.parsed_bytes, "rawBytes": page.anatomy["rawBytes"]}
    return cost
