"""Every route of the site in one table. Handlers stay thin: they read parameters and call siteapi.

Run in production with waitress (see `serve()` and the Makefile); tests start the same `make_app`
in waitress on a loopback port.
"""
from __future__ import annotations

import logging
import os
import sys

import bottle

from siteapi import db, openapi, pages
from siteapi.config import Settings, SettingsError, load_settings
from siteapi.content import markdown
from siteapi.ratelimit import RateLimiter
from siteapi.search import search_endpoint
from siteapi.web import DOC_CACHE, ApiError, Reply, Site, params, wants_markdown


def make_app(settings: Settings) -> Site:
    limiter = RateLimiter(settings.rates, settings.rate_storage)
    site = Site(settings, limiter, lambda fmt, body, path: pages.render_error(settings, fmt, body, path))

    def conn():
        try:
            return db.reader(settings.db_path)
        except Exception:
            raise ApiError(503, "The site's database cannot be read right now; try again in a minute.",
                           code="storage_unavailable") from None

    def accept() -> str:
        return bottle.request.headers.get("Accept", "")

    # -- the JSON API ------------------------------------------------------------------------------
    def search():
        return search_endpoint(conn(), params(), settings.public_base_url)

    def resume():
        row = conn().execute("SELECT body FROM site_files WHERE name = 'resume.json'").fetchone()
        if row is None:
            raise ApiError(404, "No resume is published yet.", code="not_found")
        return Reply(row["body"], cache="public, max-age=0, must-revalidate, s-maxage=86400")

    # -- documents for agents --------------------------------------------------------------------
    def openapi_json():
        return Reply(openapi.document(settings), content_type="application/openapi+json", cache=DOC_CACHE)

    def api_catalog():
        profile = 'application/linkset+json; profile="https://www.rfc-editor.org/info/rfc9727"'
        return Reply(openapi.catalog(settings), content_type=profile, cache=DOC_CACHE)

    def api_list():
        return openapi.api_endpoints(openapi.document(settings))

    def llms_txt():
        return Reply(pages.llms_txt(conn(), settings, api_list()), content_type="text/plain; charset=utf-8",
                     cache=DOC_CACHE)

    def llms_full_txt():
        return Reply(pages.llms_full_txt(conn(), settings, api_list()), content_type="text/plain; charset=utf-8",
                     cache=DOC_CACHE)

    def sitemap():
        return Reply(pages.sitemap_xml(conn(), settings, ["/developers"]), content_type="application/xml",
                     cache=DOC_CACHE)

    def robots():
        return Reply(pages.robots_txt(settings), content_type="text/plain; charset=utf-8", cache=DOC_CACHE)

    def developers(markdown_twin=False):
        intro_row = pages.page_row(conn(), "/developers")
        text = openapi.guide_markdown(settings, intro_row["body"] if intro_row else "")
        if markdown_twin or wants_markdown(accept()):
            return pages.markdown_reply(text, cache=DOC_CACHE)
        body = markdown.render(text.split("\n", 2)[2])  # the template prints the title itself
        return Reply(pages.html_page(settings, "Developer guide", "Every endpoint of the read-only JSON API, "
                                     "with a curl example each.", body, "/developers", "/developers.md"),
                     content_type="text/html; charset=utf-8", cache=DOC_CACHE, headers={"Vary": "Accept"})

    # -- content pages and everything else -------------------------------------------------------
    def page_or_404(path):
        try:
            return pages.serve_page(conn(), settings, path, accept())
        except ApiError as exc:
            if exc.status != 404:
                raise
        known = [r["path"] for r in conn().execute("SELECT path FROM pages")] + [r[0] for r in site.routes]
        raise ApiError(404, f"Nothing lives at {path}.", code="not_found",
                       hint="See /sitemap.xml for every page and /openapi.json for every API endpoint.",
                       suggestions=pages.suggest(path, known, settings.public_base_url))

    R = site.route
    R("/search.json", search)
    R("/resume.json", resume)
    R("/openapi.json", openapi_json)
    R("/.well-known/api-catalog", api_catalog)
    R("/llms.txt", llms_txt)
    R("/llms-full.txt", llms_full_txt)
    R("/sitemap.xml", sitemap)
    R("/robots.txt", robots)
    R("/developers", developers)
    R("/developers.md", lambda: developers(markdown_twin=True))
    site.fallback(page_or_404)
    return site


def serve() -> None:
    """Start waitress on 127.0.0.1:SITE_PORT behind the trusted local proxy (Caddy)."""
    import waitress

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = load_settings()
    except SettingsError as exc:
        sys.exit(f"app: {exc}")
    site = make_app(settings)
    waitress.serve(site.wsgi, host="127.0.0.1", port=int(os.environ.get("SITE_PORT", "8000")), threads=8,
                   trusted_proxy="127.0.0.1", trusted_proxy_count=1,
                   trusted_proxy_headers={"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"},
                   clear_untrusted_proxy_headers=True, ident="siteapi")


if __name__ == "__main__":
    serve()
