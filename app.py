"""Every route of the site in one table. Handlers stay thin: they read parameters and call siteapi.

Run in production with waitress (see `serve()` and the Makefile); tests start the same `make_app`
in waitress on a loopback port.
"""
from __future__ import annotations

import json
import logging
import sqlite3
import sys
from contextlib import closing, nullcontext
from urllib.parse import parse_qsl

import bottle

from siteapi import agentdocs, ask, botauth, db, images, openapi, pages, photos, resume, resume_pdf, serving
from siteapi.config import Settings, SettingsError, load_settings
from siteapi.content import markdown
from siteapi.feeds import around, coffee, ledger, tracks
from siteapi.lens import census, cloudflare, observe, scan
from siteapi.lens.fetch import Fetcher, fetcher_from_settings
from siteapi.mcp import McpServer
from siteapi.ratelimit import RateLimiter, lens_target_budget, lens_work_slots
from siteapi.search import search_endpoint
from siteapi.web import (DOC_CACHE, ERROR_CACHE, NO_STORE, ApiError, Reply, Site, body, cached_json, caller,
                         header, params, wants_markdown, with_etag)


RESUME_CACHE = "public, max-age=0, must-revalidate, s-maxage=86400"  # REFERENCE: all three resume forms
NOT_OK = {"ok": False}  # the error bodies of endpoints whose answers carry an ok flag (API.md 2.1)
GUIDE = pages.AppPage("/developers", "/developers.md", "Developer guide",
                      "Every endpoint of the read-only JSON API, with a curl example each.")


def make_app(settings: Settings, fetcher: Fetcher | None = None) -> Site:
    """The site; `fetcher` replaces the lens's production fetcher (tests aim it at loopback sites)."""
    fetcher = fetcher or fetcher_from_settings(settings)
    db.upgrade(settings.db_path)
    limiter = RateLimiter(settings.rates, settings.rate_storage)
    lens_budget = lens_target_budget(settings)  # fresh lens scans of one host, whoever asks
    site = Site(settings, limiter, lambda fmt, body, path: pages.render_error(settings, fmt, body, path),
                lambda path, query_string: suggest(path, query_string))

    def conn():
        return db.reader(settings.db_path)  # a sqlite3.Error becomes the 503 storage_unavailable (web.Site.serve)

    def accept() -> str:
        return header("Accept")

    # -- the JSON API ------------------------------------------------------------------------------
    def search():
        return search_endpoint(conn(), params(), settings)

    def stored_resume() -> str:
        return resume.stored(conn())

    def resume_as_json():
        return with_etag(Reply(stored_resume(), cache=RESUME_CACHE))

    def resume_as_markdown():
        return with_etag(pages.markdown_reply(
            resume.markdown(json.loads(stored_resume()), settings.url("/resume.json")), cache=RESUME_CACHE))

    def resume_as_pdf():
        return with_etag(Reply(resume_pdf.render(stored_resume(), settings.url("/resume.json")),
                               content_type="application/pdf", cache=RESUME_CACHE,
                               headers={"Content-Disposition": 'inline; filename="resume.pdf"'}))

    def ask_site():
        method = bottle.request.method.upper()
        return ask.handle(
            method, params(), body(ask.MAX_BODY) if method == "POST" else None, bottle.request.content_type,
            settings, conn(), lambda: limiter.hit("ask_model", caller()).allowed, caller())

    # -- the photo archive -------------------------------------------------------------------------
    def photo_query():
        query = params()
        return cached_json(conn(), ("photos", tuple(sorted(query.items()))), lambda: photos.query(conn(), settings, query))

    def photo_manifest():
        return cached_json(conn(), ("manifest",), lambda: photos.manifest(conn(), settings))

    # -- live feeds (stored by jobs.py, served from site.db) ----------------------------------------
    # An ETag where the body stays the same between job runs; the change radar's ageMs and the
    # coffee slots' ageSeconds change every moment, so an ETag of theirs would never match.
    def now_playing():
        return with_etag(Reply(tracks.now_playing(settings)))

    def neighborhood():
        return with_etag(Reply(around.report(db.LazyReader(settings.db_path)), headers={"X-Robots-Tag": "noindex"}))

    def change_radar():
        return around.changes(db.LazyReader(settings.db_path), params().get("limit", 50))

    def coffee_slots():
        return coffee.availability(db.LazyReader(settings.db_path), settings)

    def crawl_ledger():
        return with_etag(Reply(ledger.ledger(db.LazyReader(settings.db_path), settings)))

    # -- the lens ------------------------------------------------------------------------------------
    def lens_cache():
        """site.db for the lens's lookup caches, or None while it is missing or emptied: a writer would
        build a new one with no data, and every other endpoint would serve an empty site from it
        instead of the 503 (or the last good file) until the jobs rebuild it."""
        return closing(db.connect(settings.db_path)) if db.has_content(settings.db_path) else nullcontext()

    def lens_fetch():
        query = params()
        url, mode, phases = query.get("url"), query.get("mode"), query.get("phases")
        budget = lens_budget.for_caller(caller())
        if mode is not None:
            if mode != "cloudflare":
                raise ApiError(400, "mode accepts only cloudflare (that CDN's agent-readiness level); leave it out "
                               "for the full observation.", code="bad_mode", ok=False, parameter="mode")
            observe.check_phases(phases)  # ignored by the mode, but not a value to pass unremarked
            with lens_cache() as cache:
                return cloudflare.level(url, settings, conn=cache, fetcher=fetcher, budget=budget)
        if phases is not None:
            return observe.inspect(url, settings, phases, fetcher=fetcher, budget=budget)
        with lens_cache() as cache:  # the per-origin discovery cache
            return scan.scan(url, settings, fetcher=fetcher, conn=cache, bot_views=query.get("botViews") != "0",
                             budget=budget)

    def lens_compare():
        query = params()
        return scan.compare(query.get("left"), query.get("right"), settings, fetcher=fetcher,
                            budget=lens_budget.for_caller(caller()))

    def lens_census():
        return with_etag(Reply(census.census(conn(), settings)))

    # -- documents for agents --------------------------------------------------------------------
    def openapi_json():
        return with_etag(Reply(openapi.document(settings), content_type="application/openapi+json",
                                     cache=DOC_CACHE))

    def api_catalog():
        profile = 'application/linkset+json; profile="https://www.rfc-editor.org/info/rfc9727"'
        return with_etag(Reply(openapi.catalog(settings), content_type=profile, cache=DOC_CACHE))

    def llms_txt():
        return with_etag(Reply(pages.llms_txt(conn(), settings, openapi.api_endpoints(), [GUIDE], site.routed),
                                     content_type="text/plain; charset=utf-8", cache=DOC_CACHE))

    def llms_full_txt():
        return with_etag(Reply(pages.llms_full_txt(conn(), settings, openapi.api_endpoints(), [GUIDE], site.routed),
                                     content_type="text/plain; charset=utf-8", cache=DOC_CACHE))

    def sitemap():
        return with_etag(Reply(pages.sitemap_xml(conn(), settings, [GUIDE], site.routed),
                                     content_type="application/xml", cache=DOC_CACHE))

    def robots():
        return with_etag(Reply(pages.robots_txt(settings), content_type="text/plain; charset=utf-8",
                                     cache=DOC_CACHE))

    def developers(markdown_twin=False):
        intro_row = pages.page_row(conn(), GUIDE.path)  # the content page at the guide's path is its introduction
        body = openapi.guide_markdown(settings, intro_row["body"] if intro_row else "")
        if markdown_twin or wants_markdown(accept()):
            text = pages.page_markdown({"title": GUIDE.title, "description": GUIDE.description, "kind": "page",
                                        "date": None, "body": body})
            # negotiated at /developers, not stored by shared caches, as every page's Markdown
            reply = pages.markdown_reply(text, cache=DOC_CACHE if markdown_twin else pages.NEGOTIATED_CACHE)
            if markdown_twin:
                reply.headers["Link"] = pages.canonical_link(settings, GUIDE.path)
            return with_etag(reply)
        return with_etag(pages.html_reply(pages.html_page(settings, GUIDE.title, GUIDE.description, markdown.render(body),
                                                          GUIDE.path, GUIDE.twin), cache=DOC_CACHE))

    def signature_directory():
        signer = botauth.signer_for(settings)
        if signer is None:
            return Reply({"keys": []}, content_type=botauth.DIRECTORY_TYPE)
        return Reply(signer.directory(), content_type=botauth.DIRECTORY_TYPE,
                     headers=signer.directory_headers(settings.public_base_url + botauth.DIRECTORY_PATH))

    def skill_file(name):
        tool = skills.get(name)
        if tool is None and name.replace("_", "-") in skills:  # the tool's own name, as these folders were first named
            return Reply(b"", status=308, content_type="text/plain",
                         headers={"Location": f"/.well-known/agent-skills/{name.replace('_', '-')}/SKILL.md"})
        if tool is None:
            raise ApiError(404, f"There is no skill named {name[:60]!r}; see /.well-known/agent-skills/index.json.",
                           code="not_found")
        return with_etag(pages.markdown_reply(agentdocs.skill_markdown(settings, tool), cache=DOC_CACHE))

    # -- content pages and everything else -------------------------------------------------------
    def page_or_404(path):
        try:
            return with_etag(pages.serve_page(conn(), settings, path, accept(), site.routed))
        except ApiError as exc:
            if exc.status != 404:
                raise
        raise ApiError(404, f"Nothing lives at {pages.shown_path(path)}.", code="not_found")

    def suggest(path, query_string):
        """The closest real pages to a path that names nothing (the routes alone when site.db is down)."""
        try:
            known = {r["path"]: r["path"] for r in conn().execute("SELECT path FROM pages")}
        except sqlite3.Error:
            known = {}
        # templates such as /images/<path> are no page; an endpoint is suggested with the request's
        # parameters it reads, and one a plain GET would be refused at (a required parameter
        # missing, no GET) as its section of the guide
        query = parse_qsl(query_string)
        known.update((rule, openapi.get_target(rule, query)) for rule in site.routes if "<" not in rule)
        return pages.suggest(path, known, settings.public_base_url)

    R = site.route
    R("/search.json", search, error_cache=ERROR_CACHE)
    R("/ask", ask_site, methods=("GET", "POST"), cache=NO_STORE)
    R("/resume.json", resume_as_json)
    R("/resume.md", resume_as_markdown)
    R("/resume.pdf", resume_as_pdf)
    R("/photos/query.json", photo_query, error_cache=ERROR_CACHE)
    R("/images/manifest.json", photo_manifest, error_cache=ERROR_CACHE)
    R("/images/<path:path>", lambda path: images.serve_file(settings, path), cache=photos.THUMBNAIL_CACHE, may_not_exist=True)
    R("/rn/tracks", now_playing, cache="public, max-age=3600, s-maxage=3600", error_fields={"tracks": []},
      error_cache=ERROR_CACHE)
    R("/around/json", neighborhood, cache="public, max-age=60, s-maxage=300")
    R("/around/changes.json", change_radar, cache="public, max-age=60, s-maxage=300", error_fields=NOT_OK)
    R("/coffee/availability.json", coffee_slots, options=False, cache="public, max-age=0, s-maxage=30")
    R("/ledger.json", crawl_ledger, error_fields=NOT_OK, error_cache=ERROR_CACHE)
    lens_slots = lens_work_slots(settings)
    R("/lens/fetch", lens_fetch, policy="inspect", cache=NO_STORE, error_fields=NOT_OK, slots=lens_slots)
    R("/lens/compare.json", lens_compare, policy="compare", cache=NO_STORE, error_fields=NOT_OK, slots=lens_slots)
    R("/lens/census.json", lens_census, cache="public, max-age=300, s-maxage=900", error_fields=NOT_OK)
    mcp = McpServer(site, settings, fetcher=fetcher, slots=lens_slots, budget=lens_budget)
    R("/mcp", mcp.handle, methods=("POST",), cache=NO_STORE, error_body=mcp.refusal)
    skills = {agentdocs.skill_name(tool): tool for tool in mcp.tools.values()}  # skill_file's, by skill name
    R("/mcp/server-card", mcp.draft_card_reply)
    R("/.well-known/agent-card.json",
      lambda: with_etag(Reply(agentdocs.agent_card(settings, mcp.tools, mcp.info["version"]), cache=DOC_CACHE)))
    R("/.well-known/agent-skills/index.json",
      lambda: with_etag(Reply(agentdocs.skills_index(settings, mcp.tools), cache=DOC_CACHE)))
    R("/.well-known/agent-skills/<name>/SKILL.md", skill_file, may_not_exist=True)
    R("/.well-known/mcp/server-card.json", mcp.scanner_card_reply)
    R(botauth.DIRECTORY_PATH, signature_directory, cache="public, max-age=300")  # the signature's lifetime
    R("/openapi.json", openapi_json)
    R("/.well-known/api-catalog", api_catalog)
    R("/llms.txt", llms_txt)
    R("/llms-full.txt", llms_full_txt)
    R("/sitemap.xml", sitemap)
    R("/robots.txt", robots)
    R("/developers", developers)
    R("/developers.md", lambda: developers(markdown_twin=True))
    R("/auth.md", lambda: page_or_404("/documents/auth.md"), may_not_exist=True)  # where agents look for it
    site.fallback(page_or_404)
    return site


def serve() -> None:
    """Start waitress on 127.0.0.1:SITE_PORT behind the trusted local proxy (Caddy)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = load_settings()
    except SettingsError as exc:
        sys.exit(f"app: {exc}")
    site = make_app(settings)
    serving.serve(site.wsgi, port=settings.port, ident="siteapi")


if __name__ == "__main__":
    serve()
