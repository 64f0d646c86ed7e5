"""The [lens] settings, read in one place with their defaults and bounds: the page fetch's
(`lens_settings`) and the full scan's, mode=cloudflare's and the caches' (`scan_settings`)."""
from __future__ import annotations

from datetime import date

from siteapi.config import SettingsError, option


def lens_settings(settings) -> dict:
    """The page fetch's [lens] settings and the token rates, with defaults applied."""
    return {
        "parse_kb": option(settings, "lens", "parse_kb", 256, 8, 4096),
        "timeout_s": option(settings, "lens", "timeout_s", 8.0, 1, 60),
        "max_redirects": option(settings, "lens", "max_redirects", 5, 0, 10),
        "raw_cap_kb": option(settings, "lens", "raw_cap_kb", 2048, 64, 16384),
        "rates": option(settings, "lens", "rates", []),  # none: cost.DEFAULT_RATES
        "rates_checked": _rates_checked(settings),
    }


def _rates_checked(settings) -> str:
    """[lens] rates_checked as YYYY-MM-DD: a TOML date (2026-11-21, unquoted) or that text in quotes."""
    written = settings.section("lens").get("rates_checked") if settings is not None else None
    checked = written.isoformat() if type(written) is date else option(settings, "lens", "rates_checked", "")
    try:
        return checked and date.fromisoformat(checked).isoformat()
    except ValueError:
        raise SettingsError(f"Setting [lens] rates_checked (SITE_LENS_RATES_CHECKED) must be the date the prices "
                            f"were last checked, such as 2026-11-21, not {checked!r}.") from None


def scan_settings(settings) -> dict:
    """The [lens] settings of the full scan, of mode=cloudflare and of the caches, with defaults applied."""
    def lens(key, default, low=None, high=None):
        return option(settings, "lens", key, default, low, high)

    return {
        "scan_timeout_s": lens("scan_timeout_s", 10.0, 1, 60),
        "probe_timeout_s": lens("probe_timeout_s", 5.0, 0.5, 30),
        "subrequest_cap": lens("subrequest_cap", 48, 1, 200),
        "concurrency": lens("scan_concurrency", 16, 1, 64),
        "discovery_cache_hours": lens("discovery_cache_hours", 6.0, 0, 168),
        "cloudflare_scanner_url": lens("cloudflare_scanner_url", "https://isitagentready.com/mcp"),
        "cloudflare_report_url": lens("cloudflare_report_url", "https://isitagentready.com/"),
        "cloudflare_cache_hours": lens("cloudflare_cache_hours", 6.0, 0, 168),
        "cloudflare_timeout_s": lens("cloudflare_timeout_s", 9.0, 1, 30),
        "dns_nameservers": [str(n) for n in lens("dns_nameservers", [])],
    }
