"""The neighborhood crawl against loopback firm homepages with robots.txt rules, and its readers."""
from __future__ import annotations

import datetime as dt
import hashlib
import json
from urllib.parse import urlsplit

import pytest

import jobs
from app import make_app
from conftest import Client
from servers import serve_wsgi
from siteapi import db
from siteapi.botauth import signer_for
from siteapi.config import SettingsError, load_settings
from siteapi.feeds import FeedError
from siteapi.feeds.around import ROSTER, changes, report, roster, run_around
from siteapi.feeds.crawlers import PRODUCT_USER_AGENT
from siteapi.lens.fetch import AddressPolicy, Fetcher
from siteapi.web import ApiError
from feeds_servers import FirmServer, feeds_settings


def loopback_fetcher(settings) -> Fetcher:
    """The production crawl path through the lens's safe fetcher and the site's signer, with only the
    roster's loopback ports allowed and the time limit shortened so slow-server tests stay fast (yet
    long enough that a busy machine never fails a firm that answers; a slow firm takes longer still)."""
    ports = frozenset(("127.0.0.1", urlsplit(firm["url"]).port) for firm in roster(settings))
    return Fetcher(policy=AddressPolicy(allow=ports), resolve=lambda host, t: ["127.0.0.1"], timeout_s=3.0,
                   signer=signer_for(settings))


@pytest.fixture
def firms():
    servers = {
        "Alpha": FirmServer("Alpha Ventures"),
        # a form feed is no line break to Google's parser, whose line numbers name the rule shown
        "Beta": FirmServer("Beta Capital", robots="# notes\fmore notes\nUser-agent: *\nAllow: /\n\n"
                                                  "User-agent: AadharshBot\nDisallow: /\n"),
        "Gamma": FirmServer("Gamma Fund", robots="not found", robots_status=404),
        "Delta": FirmServer("Delta Partners", robots="maintenance", robots_status=503),
        "Epsilon": FirmServer("Epsilon"),
    }
    servers["Epsilon"].fault = "huge"
    yield servers
    for server in servers.values():
        server.close()


def settings_for(tmp_path, firms):
    entries = [{"name": name, "url": server.url + ("/old" if name == "Gamma" else "/")} for name, server in firms.items()]
    return feeds_settings(tmp_path, {"around_roster": entries})


def reader(settings):
    return db.connect(settings.db_path, readonly=True)


def test_crawl_obeys_robots_and_records_each_firm(tmp_path, firms):
    settings = settings_for(tmp_path, firms)
    summary = run_around(settings, fetcher=loopback_fetcher(settings))
    assert summary.startswith("crawled 5 firms: 3 read, 2 skipped by robots, 0 failed")
    body = report(reader(settings))
    assert body["crawledBy"] == PRODUCT_USER_AGENT and body["count"] == 5 and body["crawledAt"].endswith("Z")
    assert body["signedWith"] == signer_for(settings).key_id  # Web Bot Auth; verified in test_botauth
    assert all('keyid="' + body["signedWith"] + '"' in headers["Signature-Input"]
               for server in firms.values() for _, _, headers in server.requests)
    rows = {r["name"]: r for r in body["results"]}
    assert {r["name"] for r in body["results"][-2:]} == {"Beta", "Delta"}  # skipped rows last
    alpha = rows["Alpha"]
    page = firms["Alpha"].homepage().encode()
    assert alpha["status"] == 200 and alpha["title"] == "Alpha Ventures"
    assert alpha["description"] == "Alpha Ventures backs founders." and alpha["ogImage"] == firms["Alpha"].url + "/og.png"
    assert alpha["server"] == "nginx" and alpha["contentType"].startswith("text/html")
    assert alpha["bodyHash"] == hashlib.sha256(page).hexdigest() and alpha["bytesRead"] == len(page)
    assert alpha["robots"] == "allow" and alpha["truncated"] is False and alpha["lastModified"]
    beta = rows["Beta"]
    assert beta["skipped"] == "robots" and beta["robots"] == "disallow" and beta["robotsRule"] == "Disallow: /"
    assert beta["status"] is None and not any(p == "/" for _, p, _ in firms["Beta"].requests)
    assert rows["Delta"]["skipped"] == "robots_unavailable" and rows["Delta"]["robots"] == "unknown"
    gamma = rows["Gamma"]
    assert gamma["robots"] == "allow" and gamma["finalUrl"] == firms["Gamma"].url + "/home" and gamma["status"] == 200
    assert rows["Epsilon"]["truncated"] is True and rows["Epsilon"]["bytesRead"] == 200 * 1024
    agents = {h.get("User-Agent") for s in firms.values() for _, _, h in s.requests}
    assert agents == {PRODUCT_USER_AGENT}


def test_each_redirect_hop_is_asked_of_its_own_robots_txt(tmp_path):
    """A homepage that redirects to another origin, or to a path of its own that robots.txt keeps us
    from, is not read: the roster URL's robots.txt says nothing about where it sends us."""
    servers = {"Vanity": FirmServer("Vanity"),
               "Elsewhere": FirmServer("Elsewhere", robots="User-agent: AadharshBot\nDisallow: /\n"),
               "Moved": FirmServer("Moved", robots="User-agent: AadharshBot\nAllow: /$\nDisallow: /home\n"),
               "Fine": FirmServer("Fine"), "Target": FirmServer("Target")}
    try:
        servers["Vanity"].redirect_to = servers["Elsewhere"].url + "/"
        servers["Moved"].redirect_to = "/home"
        servers["Fine"].redirect_to = servers["Target"].url + "/en/home"
        entries = [{"name": name, "url": servers[name].url + "/"} for name in ("Vanity", "Moved", "Fine")]
        settings = feeds_settings(tmp_path, {"around_roster": entries})
        ports = frozenset(("127.0.0.1", urlsplit(server.url).port) for server in servers.values())
        fetcher = Fetcher(policy=AddressPolicy(allow=ports), resolve=lambda host, t: ["127.0.0.1"], timeout_s=3.0)
        assert run_around(settings, fetcher=fetcher).startswith("crawled 3 firms: 1 read, 2 skipped by robots")
        rows = {r["name"]: r for r in report(reader(settings))["results"]}
        vanity, moved, fine = rows["Vanity"], rows["Moved"], rows["Fine"]
        assert vanity["skipped"] == "robots" and vanity["robotsRule"] == "Disallow: /" and vanity["status"] is None
        assert vanity["finalUrl"] == servers["Elsewhere"].url + "/"
        assert [p for _, p, _ in servers["Elsewhere"].requests] == ["/robots.txt"]
        assert moved["skipped"] == "robots" and moved["robotsRule"] == "Disallow: /home"
        assert moved["finalUrl"] == servers["Moved"].url + "/home"
        assert [p for _, p, _ in servers["Moved"].requests] == ["/robots.txt", "/"]  # robots.txt read once
        assert fine["status"] == 200 and fine["title"] == "Target" and fine["finalUrl"] == servers["Target"].url + "/en/home"
        assert [p for _, p, _ in servers["Target"].requests] == ["/robots.txt", "/en/home"]
    finally:
        for server in servers.values():
            server.close()


def test_pending_before_the_first_crawl(tmp_path, firms):
    settings = settings_for(tmp_path, firms)
    db.connect(settings.db_path).close()
    for prepare in (lambda: None, lambda: db.writer(settings.db_path).close()):
        prepare()
        with pytest.raises(ApiError) as caught:
            report(reader(settings))
        err = caught.value
        assert err.status == 503 and err.headers["Retry-After"] == "86400"
        assert err.body["pending"] is True and err.body["note"] == "no snapshot yet; no crawl has succeeded so far"


def test_changes_between_crawls_with_severity(tmp_path, firms):
    settings = settings_for(tmp_path, firms)
    run_around(settings, fetcher=loopback_fetcher(settings))
    assert changes(reader(settings))["changes"] == []
    firms["Alpha"].title = "Alpha Ventures — Fund IV"
    firms["Gamma"].page_status = 500
    firms["Beta"].robots = "User-agent: *\nDisallow:\n"
    run_around(settings, fetcher=loopback_fetcher(settings))
    body = changes(reader(settings))
    assert body["ok"] is True and body["available"] is True and body["targetCount"] == 5
    found = {c["name"]: c for c in body["changes"]}
    assert set(found) == {"Alpha", "Gamma", "Beta"}
    alpha = found["Alpha"]
    assert alpha["severity"] == "medium" and alpha["previousObservedAt"] <= alpha["observedAt"]
    fields = {c["field"]: c for c in alpha["changes"]}
    assert set(fields) == {"title", "content"}
    assert fields["title"] == {"field": "title", "before": "Alpha Ventures", "after": "Alpha Ventures — Fund IV"}
    assert len(fields["content"]["before"]) == 64  # hashes, never bodies
    assert found["Gamma"]["severity"] == "high" and {"field": "status", "before": 200, "after": 500} in found["Gamma"]["changes"]
    beta = {c["field"]: c for c in found["Beta"]["changes"]}
    assert found["Beta"]["severity"] == "high" and beta["robots"]["after"] == "allow" and beta["skipped"]["after"] is None
    assert "<html" not in json.dumps(body) and "portfolio" not in json.dumps(body)
    assert all(c["ageMs"] >= 0 for c in body["changes"])
    assert len(changes(reader(settings), limit=1)["changes"]) == 1
    assert len(changes(reader(settings), limit="lots")["changes"]) == 3
    assert len(changes(reader(settings), limit=-5)["changes"]) == 1
    firms["Alpha"].title = "Alpha Ventures"
    run_around(settings, fetcher=loopback_fetcher(settings))
    newest = changes(reader(settings))["changes"]
    assert newest[0]["observedAt"] >= newest[-1]["observedAt"]
    assert [c["name"] for c in newest if c["changes"][0].get("after") == "Alpha Ventures"] == ["Alpha"]



def test_the_change_limit_is_50_by_default_and_clamped_to_1_through_100(tmp_path, firms, checker):
    """API.md §4/§9: 50 changes unless `limit` says otherwise (a non-number too), at most 100, at least 1;
    told apart only with more than 100 changes stored (a real crawl's change, then 119 older copies)."""
    settings = settings_for(tmp_path, firms)
    run_around(settings, fetcher=loopback_fetcher(settings))
    firms["Alpha"].title = "Alpha Ventures — Fund IV"
    run_around(settings, fetcher=loopback_fetcher(settings))
    conn = db.writer(settings.db_path)
    [(crawled,)] = conn.execute("SELECT observed_at FROM around_changes").fetchall()  # Alpha's title, id 1
    newest = dt.datetime.strptime(crawled, "%Y-%m-%dT%H:%M:%SZ")
    with db.transaction(conn):
        for n in range(1, 120):
            conn.execute("INSERT INTO around_changes (crawl_id, target, name, observed_at, previous_observed_at, "
                         "severity, changes) SELECT crawl_id, target, name, ?, previous_observed_at, severity, changes "
                         "FROM around_changes WHERE id = 1", ((newest - dt.timedelta(minutes=n)).strftime("%Y-%m-%dT%H:%M:%SZ"),))
    conn.close()
    for limit, expected in ((None, 50), ("lots", 50), ("", 50), (500, 100), (100, 100), (99, 99), (0, 1), (-5, 1)):
        got = changes(reader(settings)) if limit is None else changes(reader(settings), limit=limit)
        assert len(got["changes"]) == expected, limit
    assert got["changes"][0]["observedAt"] == crawled  # the newest
    with serve_wsgi(make_app(settings).wsgi) as base:
        api = Client(base, checker)
        for query, expected in (("", 50), ("?limit=lots", 50), ("?limit=500", 100), ("?limit=0", 1), ("?limit=-5", 1)):
            body = api.get("/around/changes.json" + query).json()
            assert len(body["changes"]) == expected, query
            assert body["changes"][0]["observedAt"] == crawled and body["changes"][0]["name"] == "Alpha"

def test_a_run_without_robots_txt_observes_nothing_and_changes_nothing(tmp_path, firms):
    settings = settings_for(tmp_path, firms)
    run_around(settings, fetcher=loopback_fetcher(settings))
    firms["Alpha"].robots_status = 503
    run_around(settings, fetcher=loopback_fetcher(settings))
    alpha = next(r for r in report(reader(settings))["results"] if r["name"] == "Alpha")
    assert alpha["skipped"] == "robots_unavailable" and alpha["title"] is None  # the snapshot says so
    firms["Alpha"].title = "Alpha Ventures II"  # changed while it could not be observed
    firms["Alpha"].robots_status = 200
    run_around(settings, fetcher=loopback_fetcher(settings))
    found = [c for c in changes(reader(settings))["changes"] if c["name"] == "Alpha"]
    assert len(found) == 1  # none for the skipped run, none for the recovery itself
    fields = {c["field"]: c for c in found[0]["changes"]}
    assert set(fields) == {"title", "content"}  # against the last observation
    assert fields["title"]["before"] == "Alpha Ventures" and fields["title"]["after"] == "Alpha Ventures II"
    # Delta's robots.txt has never answered: it was never observed, so nothing has changed
    assert not [c for c in changes(reader(settings))["changes"] if c["name"] == "Delta"]


def test_a_homepage_in_another_charset_is_read_in_it(tmp_path):
    server = FirmServer("Café Crème Capital – Fonds", encoding="windows-1252")
    try:
        settings = feeds_settings(tmp_path, {"around_roster": [{"name": "Café", "url": server.url + "/"}]})
        run_around(settings, fetcher=loopback_fetcher(settings))
        row = report(reader(settings))["results"][0]
        assert row["title"] == "Café Crème Capital – Fonds"
        assert row["description"] == "Café Crème Capital – Fonds backs founders."
    finally:
        server.close()


def test_slow_and_down_firms_are_recorded_not_fatal(tmp_path, firms):
    settings = settings_for(tmp_path, firms)
    firms["Delta"].robots_status = 200  # two of five unreached: fewer than half, so the crawl is stored
    firms["Alpha"].fault = "slow"
    firms["Gamma"].close()
    summary = run_around(settings, fetcher=loopback_fetcher(settings))
    assert summary.startswith("crawled 5 firms: 2 read, 2 skipped by robots, 1 failed")
    rows = {r["name"]: r for r in report(reader(settings))["results"]}
    assert "error" in rows["Alpha"] and rows["Alpha"]["status"] is None
    assert rows["Gamma"]["skipped"] == "robots_unavailable"  # unreachable robots.txt: skipped this run
    assert rows["Beta"]["skipped"] == "robots"
    live = [r["name"] for r in report(reader(settings))["results"][:2]]
    assert sorted(live) == ["Delta", "Epsilon"]  # the live rows come first


def test_a_crawl_that_reaches_no_firm_fails_and_keeps_the_last_snapshot(tmp_path, firms, checker):
    settings = settings_for(tmp_path, firms)
    fetcher = loopback_fetcher(settings)
    assert jobs.run_job(settings, "around", fetcher=fetcher)[0]
    firms["Alpha"].title = "Alpha Ventures — Fund IV"
    assert jobs.run_job(settings, "around", fetcher=fetcher)[0]

    def radar(api):
        body = api.get("/around/changes.json").json()
        return body["latestObservedAt"], [{k: v for k, v in c.items() if k != "ageMs"} for c in body["changes"]]

    with serve_wsgi(make_app(settings).wsgi) as base:
        api = Client(base, checker)
        snapshot, changes_before = api.get("/around/json").json(), radar(api)
        assert snapshot["count"] == 5 and [c["name"] for c in changes_before[1]] == ["Alpha"]
        for server in firms.values():
            server.close()
        ok, error = jobs.run_job(settings, "around", fetcher=fetcher)
        assert not ok and "reached none of the 5 firms" in error
        assert api.get("/around/json").json() == snapshot
        assert radar(api) == changes_before
    runs = reader(settings).execute("SELECT ok, error FROM job_runs WHERE name = 'around' ORDER BY id").fetchall()
    assert [r["ok"] for r in runs] == [1, 1, 0] and runs[2]["error"].startswith("FeedError: The crawl reached none")


def test_most_firms_reached_is_stored(tmp_path, firms):
    """Beta's robots.txt disallows us: that too is an answer from the firm; Delta's 503 is not."""
    settings = settings_for(tmp_path, firms)
    firms["Epsilon"].close()  # Alpha, Beta and Gamma answer: three of five
    assert run_around(settings, fetcher=loopback_fetcher(settings)).startswith("crawled 5 firms")
    assert report(reader(settings))["count"] == 5


def test_most_firms_unreached_at_once_is_held_back_as_our_outage(tmp_path, firms):
    """Storing it would put a change for each unreached firm on the radar, and another on recovery."""
    settings = settings_for(tmp_path, firms)
    run_around(settings, fetcher=loopback_fetcher(settings))
    before = report(reader(settings))
    for name in ("Gamma", "Epsilon"):  # with Delta's 503, three of five unreached
        firms[name].close()
    with pytest.raises(FeedError, match="reached only 2 of the 5 firms"):
        run_around(settings, fetcher=loopback_fetcher(settings))
    assert report(reader(settings)) == before


def test_robots_txt_unavailable_everywhere_reaches_no_firm(tmp_path, firms):
    settings = settings_for(tmp_path, firms)
    for server in (s for name, s in firms.items() if name != "Delta"):  # Delta's robots.txt answers 503
        server.close()
    db.writer(settings.db_path).close()
    with pytest.raises(FeedError, match="reached none of the 5 firms"):
        run_around(settings, fetcher=loopback_fetcher(settings))
    with pytest.raises(ApiError) as caught:
        report(reader(settings))
    err = caught.value
    assert err.body["pending"] is True  # nothing was stored
    assert err.status == 503 and err.body["code"] == "pending" and err.headers["Retry-After"] == "86400"
    assert "no crawl has succeeded" in err.body["error"] and "has not run" not in err.body["error"]  # it ran


def test_history_older_than_90_days_is_pruned(tmp_path, firms):
    settings = settings_for(tmp_path, firms)
    run_around(settings, fetcher=loopback_fetcher(settings))
    firms["Alpha"].title = "Changed"
    run_around(settings, fetcher=loopback_fetcher(settings))
    conn = db.writer(settings.db_path)
    with db.transaction(conn):
        conn.execute("UPDATE around_crawls SET crawled_at = '2020-01-01T00:00:00Z'")
        conn.execute("UPDATE around_changes SET observed_at = '2020-01-01T00:00:00Z'")
    run_around(settings, fetcher=loopback_fetcher(settings))
    assert conn.execute("SELECT COUNT(*) FROM around_crawls").fetchone()[0] == 1
    assert conn.execute("SELECT COUNT(DISTINCT crawl_id) FROM around_results").fetchone()[0] == 1
    assert conn.execute("SELECT COUNT(*) FROM around_changes").fetchone()[0] == 0
    assert report(reader(settings))["count"] == 5


def test_unreadable_history_is_503(tmp_path):
    settings = feeds_settings(tmp_path)
    settings.db_path.write_bytes(b"not sqlite" * 500)
    import sqlite3
    with pytest.raises(ApiError) as caught:
        changes(sqlite3.connect(settings.db_path))
    assert caught.value.status == 503 and caught.value.body["changes"] == [] and caught.value.body["available"] is False
    with pytest.raises(sqlite3.DatabaseError):  # the app's 503 storage_unavailable (test_feeds_http)
        report(sqlite3.connect(settings.db_path))


def test_roster_defaults_and_validation(tmp_path):
    assert [f["name"] for f in roster(feeds_settings(tmp_path))] == [name for name, _ in ROSTER]
    assert [f["url"] for f in roster(load_settings())] == [url for _, url in ROSTER]  # site.toml lists none
    assert len(ROSTER) == 20 and all(url.startswith("https://") for _, url in ROSTER)
    with pytest.raises(SettingsError, match="needs a name and an http"):  # when the settings load
        feeds_settings(tmp_path, {"around_roster": [{"name": "X", "url": "ftp://x"}]})
    with pytest.raises(SettingsError, match="lists https://x.example/ twice"):
        feeds_settings(tmp_path, {"around_roster": [{"name": "X", "url": "https://x.example/"},
                                                   {"name": "X again", "url": "https://x.example/"}]})


def test_og_images_are_uris_or_nothing(tmp_path):
    """A firm's og:image is kept as an absolute http(s) URI (spaces and <> percent-encoded, as
    browsers send them); one that cannot be a URI is dropped and the homepage row still stands."""
    written = {"Spaces": ("/a b.png?x=<y>", "/a%20b.png?x=%3Cy%3E"), "Template": ("http://[YOUR-DOMAIN]/og.png", None),
               "Script": ("javascript:alert(1)", None), "Long": ("/" + "x" * 400 + ".png", None)}
    firms = {name: FirmServer(name, og_image=html) for name, (html, _) in written.items()}
    try:
        settings = feeds_settings(tmp_path, {"around_roster": [{"name": n, "url": f.url + "/"} for n, f in firms.items()]})
        run_around(settings, fetcher=loopback_fetcher(settings))
        rows = {r["name"]: r for r in report(reader(settings))["results"]}
        for name, (_, expected) in written.items():
            assert rows[name]["status"] == 200 and "error" not in rows[name], rows[name]
            assert rows[name]["ogImage"] == (firms[name].url + expected if expected else None), name
    finally:
        for server in firms.values():
            server.close()


class LogoTitledFirm(FirmServer):
    """A homepage whose only <title> names its inline SVG logo; the page's own title is og:title."""

    def homepage(self) -> str:
        return super().homepage().replace(f"<title>{self.title}</title>", f'<meta property="og:title" content="{self.title}">'
                                          ).replace("<h1>", "<svg><title>Logo icon</title></svg><h1>")


def test_a_title_inside_an_svg_is_not_the_homepage_title(tmp_path):
    """The crawl took the logo's title for the page's, as the lens does not (style_review24 M1)."""
    firm = LogoTitledFirm("Logo Ventures")
    try:
        settings = feeds_settings(tmp_path, {"around_roster": [{"name": "Logo", "url": firm.url + "/"}]})
        run_around(settings, fetcher=loopback_fetcher(settings))
        assert report(reader(settings))["results"][0]["title"] == "Logo Ventures"
    finally:
        firm.close()


def test_a_homepage_that_changes_only_in_noise_is_no_change(tmp_path):
    """Nonces, challenge tokens and obfuscated e-mail links differ in every answer of many homepages:
    the body hash changes each crawl, the words a visitor reads do not."""
    server = FirmServer("Noisy Capital")
    server.fault = "noise"
    try:
        settings = feeds_settings(tmp_path, {"around_roster": [{"name": "Noisy", "url": server.url + "/"}]})
        run_around(settings, fetcher=loopback_fetcher(settings))
        first = report(reader(settings))["results"][0]["bodyHash"]
        assert run_around(settings, fetcher=loopback_fetcher(settings)).endswith("0 changed")
        assert report(reader(settings))["results"][0]["bodyHash"] != first  # the bytes did change
        assert changes(reader(settings))["changes"] == []
        server.title = "Noisy Capital II"  # the <title> and the page's <h1>
        run_around(settings, fetcher=loopback_fetcher(settings))
        (found,) = changes(reader(settings))["changes"]
        assert {c["field"] for c in found["changes"]} == {"title", "content"}
        content = next(c for c in found["changes"] if c["field"] == "content")
        assert content["after"] == report(reader(settings))["results"][0]["bodyHash"]  # shown as body hashes
    finally:
        server.close()


def test_rows_stored_before_the_text_hash_compare_their_bodies(tmp_path, firms):
    settings = settings_for(tmp_path, firms)
    run_around(settings, fetcher=loopback_fetcher(settings))
    conn = db.writer(settings.db_path)
    with db.transaction(conn):
        conn.execute("UPDATE around_results SET text_hash = NULL")
    conn.close()
    run_around(settings, fetcher=loopback_fetcher(settings))
    assert changes(reader(settings))["changes"] == []  # same bodies: no change from the upgrade itself
    firms["Alpha"].title = "Alpha Ventures II"
    run_around(settings, fetcher=loopback_fetcher(settings))
    assert [c["name"] for c in changes(reader(settings))["changes"]] == ["Alpha"]


def test_a_huge_last_modified_header_is_clipped_like_the_other_headers(tmp_path):
    server = FirmServer("Headers")
    server.last_modified = "Tue, 03 Nov 2026 10:00:00 GMT" + " x" * 1500
    try:
        settings = feeds_settings(tmp_path, {"around_roster": [{"name": "Headers", "url": server.url + "/"}]})
        run_around(settings, fetcher=loopback_fetcher(settings))
        row = report(reader(settings))["results"][0]
        assert row["lastModified"].startswith("Tue, 03 Nov 2026") and len(row["lastModified"]) == 300
    finally:
        server.close()


def redirecting_firm(tmp_path):
    server = FirmServer("Redirecting Capital")
    settings = feeds_settings(tmp_path, {"around_roster": [{"name": "Redirecting", "url": server.url + "/"}]})
    return server, settings


# Where homepages send a crawler that brings no cookie: a session id, a token, a cache-buster or a
# timestamp, new in every answer, in the query or a path parameter.
NOISY_TARGETS = ["/home?sid={token}&_={number}", "/home?lang=en&session={uuid}", "/home;jsessionid={TOKEN}",
                 "/en/home?utm_source=crawler&v={number}&token={token}", "/home?{number}"]


@pytest.mark.parametrize("target", NOISY_TARGETS)
def test_noise_in_a_redirect_target_is_no_change(tmp_path, target):
    """The final URL differs in every crawl, the place it names does not: the radar used to record a
    final_url change (medium) for such a firm every day."""
    server, settings = redirecting_firm(tmp_path)
    server.redirect_to = target
    try:
        run_around(settings, fetcher=loopback_fetcher(settings))
        first = report(reader(settings))["results"][0]
        assert run_around(settings, fetcher=loopback_fetcher(settings)).endswith("0 changed")
        second = report(reader(settings))["results"][0]
    finally:
        server.close()
    assert first["status"] == second["status"] == 200 and first["title"] == "Redirecting Capital"
    assert first["finalUrl"] != second["finalUrl"]  # stored as observed, noise and all
    assert changes(reader(settings))["changes"] == []


@pytest.mark.parametrize("before,after", [
    ("/home?sid={token}", "/en/home?sid={token}"),  # a new path
    ("/home?sid={token}", "http://redirecting.test:{port}/home?sid={token}"),  # a new host
    ("/home?lang=en&sid={token}", "/home?lang=de&sid={token}"),  # a query value that is a word
    ("/home?page=2&_={number}", "/home?page=3&_={number}"),  # or a short number
])
def test_a_redirect_target_that_really_moves_is_a_change(tmp_path, before, after):
    server, settings = redirecting_firm(tmp_path)
    port = urlsplit(server.url).port
    server.redirect_to = before
    try:
        run_around(settings, fetcher=loopback_fetcher(settings))
        previous = report(reader(settings))["results"][0]["finalUrl"]
        server.redirect_to = after.replace("{port}", str(port))
        assert run_around(settings, fetcher=loopback_fetcher(settings)).endswith("1 changed")
        latest = report(reader(settings))["results"][0]["finalUrl"]
    finally:
        server.close()
    (found,) = changes(reader(settings))["changes"]
    assert found["severity"] == "medium"
    assert found["changes"] == [{"field": "final_url", "before": previous, "after": latest}]  # shown as observed
