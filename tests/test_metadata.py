"""metadata.yml documents every table and column Datasette shows, and its canned queries run; the
project's Datasette (as `make run` starts it, on a site.db built from content/) keeps the private
tables unreadable and bounds what one query can make it hold."""
import contextlib
import html
import importlib.util
import re
import socket
import sqlite3

import pytest
import requests
import yaml

from conftest import ROOT, make_settings
from servers import running
import jobs
from siteapi import db
from siteapi.content import MAX_FILE_BYTES
from siteapi.stack import datasette_command

PRIVATE = {"coffee_busy", "job_runs", "lens_discovery_cache", "lens_mode_cache", "ledger_state"}


def test_every_visible_table_and_column_is_described(tmp_path):
    conn = db.writer(tmp_path / "site.db")
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    meta = yaml.safe_load((ROOT / "metadata.yml").read_text())
    described = meta["databases"]["site"]["tables"]
    missing = []
    for table in tables:
        entry = described.get(table)
        if entry is None:
            missing.append(table)
            continue
        if entry.get("hidden"):
            continue
        if not (entry.get("description") or entry.get("description_html")):
            missing.append(f"{table} (description)")
        columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        missing += [f"{table}.{c}" for c in columns if c not in entry.get("columns", {})]
    assert not missing, f"metadata.yml does not describe: {', '.join(missing)}"


def test_the_example_page_path_is_a_page(site_settings):
    """The example Datasette gives for pages.path is a page the content job indexed, not a 404."""
    example = yaml.safe_load((ROOT / "metadata.yml").read_text())["databases"]["site"]["tables"]["pages"]["columns"]["path"]
    (path,) = re.findall(r"e\.g\. (/\S+)\.$", example)
    with contextlib.closing(db.connect(site_settings.db_path, readonly=True)) as conn:
        assert conn.execute("SELECT 1 FROM pages WHERE path = ?", (path,)).fetchone(), path


def test_canned_queries_run(tmp_path):
    conn = db.writer(tmp_path / "site.db")
    queries = yaml.safe_load((ROOT / "metadata.yml").read_text())["databases"]["site"]["queries"]
    assert "writing_by_year" in queries
    for name, query in queries.items():
        params = {name: "x" for name in re.findall(r":(\w+)", query["sql"])}
        try:
            conn.execute(query["sql"], params).fetchall()
        except sqlite3.OperationalError as exc:
            raise AssertionError(f"canned query {name}: {exc}") from None


def test_private_tables_exist_and_are_closed(tmp_path):
    conn = db.writer(tmp_path / "site.db")
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    site = yaml.safe_load((ROOT / "metadata.yml").read_text())["databases"]["site"]
    private = site["plugins"]["private-tables"]["tables"]
    assert PRIVATE <= set(private) <= tables  # a misspelt name would guard nothing
    for table in private:
        assert site["tables"][table]["hidden"] is True and site["tables"][table]["allow"] is False, table


@pytest.fixture(scope="module")
def limits():
    """plugins/query_limits.py, for its caps."""
    spec = importlib.util.spec_from_file_location("query_limits", ROOT / "plugins" / "query_limits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def datasette(site_settings, tmp_path_factory):
    """The project's Datasette on a copy of the test site.db (content/ and the demo photos), with a
    row in every private table: /lens/fetch origins and URLs, a job error, a busy time, a log path."""
    path = tmp_path_factory.mktemp("datasette") / "site.db"
    with contextlib.closing(db.connect(site_settings.db_path, readonly=True)) as source, \
            contextlib.closing(db.writer(path)) as conn:
        source.backup(conn)
        with db.transaction(conn):
            conn.execute("INSERT INTO lens_discovery_cache VALUES ('http://internal-staging.customer.test', 0, '{}')")
            conn.execute("INSERT INTO lens_mode_cache VALUES ('https://shop.test/launch?token=abc123', 0, '{}')")
            conn.execute("INSERT INTO ledger_state VALUES (1, '/srv/site/var/access.log', 0, '', 0, "
                         "'2026-01-01T00:00:00Z', 0, 0, 0)")
            conn.execute("INSERT INTO coffee_busy VALUES (0, 1, '1970-01-01T00:00:00Z', '1970-01-01T00:00:00Z')")
            conn.execute("INSERT INTO job_runs(name, started, ok, error) VALUES ('x', '', 0, 'secret')")
    with serving_datasette(path) as base:
        yield base


@contextlib.contextmanager
def serving_datasette(path):
    """The project's Datasette on `path`, as `make run` starts it; yields its /data base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}/data"

    def answers() -> bool:
        with contextlib.suppress(requests.ConnectionError):
            return requests.get(base + "/", timeout=5).status_code == 200
        return False

    with running(datasette_command(path, port), answers, "datasette", cwd=ROOT):
        yield base


def sql(datasette, query: str) -> requests.Response:
    return requests.get(datasette + "/site.json", params={"sql": query, "_shape": "array"}, timeout=30)


def test_private_tables_are_unreadable_through_datasette(datasette):
    for table in sorted(PRIVATE):
        refused = sql(datasette, f"select * from {table}")
        assert refused.status_code == 400 and "prohibited" in refused.json()["error"], table
        assert sql(datasette, f"select count(*) as n from {table}").json()[0]["n"] >= 1, table  # rows to hide
        for page in (f"{table}.json", f"{table}/1.json", f"{table}.json?_shape=array"):
            closed = requests.get(f"{datasette}/site/{page}", timeout=30)
            assert closed.status_code == 403 and closed.json()["error"].startswith(
                f"{table} is a private table"), (page, closed.text[:200])  # JSON at a .json address, not HTML
        closed = requests.get(f"{datasette}/site/{table}", timeout=30)
        assert closed.status_code == 403 and f"{table} is a private table" in closed.text, table
    leak = sql(datasette, "select count(*) from pages where exists "
                          "(select 1 from lens_discovery_cache where origin like '%staging%')")
    assert leak.status_code == 400 and "prohibited" in leak.json()["error"]


def test_a_where_that_reads_a_private_table_is_a_403_saying_what_is_public(datasette):
    """A `_where` is SQL too, and the authorizer refuses it, but Datasette's table view answered its
    refusal with a 500 (sec_audit24 #5); it is the 403 a private table's own page answers, with
    Datasette's JSON error (or its HTML page) saying what is refused and where the public tables are."""
    for table in sorted(PRIVATE):
        where = {"_where": f"exists(select * from {table})"}
        refused = requests.get(f"{datasette}/site/pages.json", params=where, timeout=30)
        assert refused.status_code == 403, (table, refused.text)
        assert refused.json() == {"ok": False, "status": 403, "title": "Forbidden", "error": (
            f"{table} is a private table: no query may read it, not even a _where (its row count is public). "
            "The public tables are listed at /data/site.")}, refused.text
        page = requests.get(f"{datasette}/site/pages", params=where, timeout=30)
        assert page.status_code == 403 and f"{table} is a private table" in page.text
    assert requests.get(f"{datasette}/site/pages.json", params={"_where": "exists(select * from photos)"},
                        timeout=30).status_code == 200


@pytest.mark.parametrize("page", ["databases", "versions", "plugins", "threads"])
def test_the_pages_describing_the_server_are_not_served(datasette, page):
    """/-/databases named site.db's path on the server, /-/versions the software and its build,
    /-/plugins every plugin and its hooks, /-/threads the threads (sec_audit24 #4)."""
    for suffix in (".json", ""):
        refused = requests.get(f"{datasette}/-/{page}{suffix}", timeout=30)
        assert refused.status_code == 403 and "site.db" not in refused.text, (page, suffix, refused.text[:300])
        assert "describes the server" in refused.text, (page, suffix)
    assert refused.headers["Content-Type"].startswith("text/html")
    assert requests.get(f"{datasette}/-/settings.json", timeout=30).json()["base_url"] == "/data/"


@pytest.mark.parametrize("query", ["select name, pgsize from dbstat", "select sum(payload) from dbstat",
                                   "select fts3_tokenizer('simple')", "select FTS3_TOKENIZER('zz', x'4141414141414141')",
                                   "select file from pragma_database_list", "select * from Main.PRAGMA_DATABASE_LIST()"])
def test_table_sizes_tokenizer_pointers_and_the_files_path_are_refused(datasette, query):
    refused = sql(datasette, query)
    assert refused.status_code == 400, refused.text
    assert "prohibited" in refused.json()["error"] or "not authorized" in refused.json()["error"], refused.text
    assert sql(datasette, "select count(*) as n from pages").json()[0]["n"] >= 1  # other reads still work


def test_one_query_cannot_make_datasette_hold_more_than_its_caps(datasette, limits):
    """Each amplifier fails with a sentence instead of growing the process: one value past the
    length cap, a result wider than the column cap, rows that add up past the result cap."""
    value, columns, result = limits.MAX_VALUE_BYTES, limits.MAX_COLUMNS, limits.MAX_RESULT_BYTES
    rows = "with recursive n(i) as (select 1 union all select i + 1 from n where i < 1000) "
    for query in (f"select zeroblob({value + 1})", f"select randomblob({value + 1})",
                  f"select replace(printf('%.*c', 1000, 'x'), 'x', printf('%.*c', {value // 1000 + 1}, 'y'))",
                  rows + f"select group_concat(printf('%.*c', {value // 1000 + 1}, 'x'), '') from n"):
        r = sql(datasette, query)
        assert r.status_code == 400 and r.json()["error"] == "string or blob too big", query
    wide = sql(datasette, "select " + ", ".join(["1"] * (columns + 1)))
    assert wide.status_code == 400 and "too many columns" in wide.json()["error"]
    heavy = sql(datasette, rows + f"select printf('%.*c', {result // 1000 + 1}, 'x') from n")
    assert heavy.status_code == 400 and f"more than {result >> 20} MiB" in heavy.json()["error"]
    assert sql(datasette, f"select length(zeroblob({value})) as n").json() == [{"n": value}]
    assert len(sql(datasette, rows + f"select printf('%.*c', {result // 1000 - 100}, 'x') from n").json()) == 1000
    # text counts as the JSON it becomes: a sixth of the cap in control characters is past it (load_audit23 #2)
    escaped = sql(datasette, rows + f"select printf('%.*c', {result // 6000 + 1}, char(1)) from n")
    assert escaped.status_code == 400 and f"more than {result >> 20} MiB" in escaped.json()["error"]


def test_what_the_site_stores_reads_well_inside_the_caps(site_settings, datasette, limits):
    """The caps sit far above the site's own data (content/ and the demo photos): the largest row is
    under a quarter of the value cap, the widest table under half the column cap, and the 1,000
    heaviest rows of any table (the most one query returns) under a quarter of the result cap."""
    with contextlib.closing(db.connect(site_settings.db_path, readonly=True)) as conn:
        conn.row_factory = None
        tables = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        widest = max(len(conn.execute(f"PRAGMA table_info({t})").fetchall()) for t in tables)
        row_bytes = {t: sorted((sum(limits.json_length(v) for v in row if isinstance(v, (str, bytes)))
                                for row in conn.execute(f"SELECT * FROM {t}")), reverse=True) for t in tables}
    assert max(max(sizes, default=0) for sizes in row_bytes.values()) * 4 < limits.MAX_VALUE_BYTES
    assert widest * 2 <= limits.MAX_COLUMNS
    assert max(sum(sizes[:1000]) for sizes in row_bytes.values()) * 4 < limits.MAX_RESULT_BYTES
    for table in ("pages", "photos", "page_vectors", "photo_vectors", "site_files"):
        r = requests.get(f"{datasette}/site/{table}.json", params={"_size": "max", "_shape": "array"}, timeout=30)
        assert r.status_code == 200 and len(r.json()) == len(row_bytes[table]), table
    longest = sql(datasette, "select * from pages order by length(body) + length(text) desc")  # a sort copies each row
    assert longest.status_code == 200 and len(longest.json()) == len(row_bytes["pages"])


@pytest.mark.parametrize("query, expected", [
    ("_sort=nope", "Cannot sort table by nope. _sort and _sort_desc take one of the table's sortable columns"),
    ("_sort_desc=rowid", "Cannot sort table by rowid."),
    ("_sort=path&_sort_desc=title", "Cannot use _sort and _sort_desc at the same time."),
    ("_through=nope", "_through takes a JSON object"),
    ('_through={"table": "photos", "column": "stem", "value": 1}', "_through takes a JSON object"),
    ("_timelimit=soon", "_timelimit takes a whole number of milliseconds."),
])
def test_a_bad_table_parameter_is_a_400_with_what_to_send(datasette, query, expected):
    """Datasette 0.65 answers these with a 500; plugins/client_errors.py makes them the caller's 400,
    in JSON for .json and on Datasette's own HTML error page otherwise."""
    as_json = requests.get(f"{datasette}/site/pages.json?{query}", timeout=30)
    assert as_json.status_code == 400 and expected in as_json.json()["error"], as_json.text[:300]
    as_html = requests.get(f"{datasette}/site/pages?{query}", timeout=30)
    assert as_html.status_code == 400 and as_html.headers["Content-Type"].startswith("text/html")
    assert "<h1>Bad request</h1>" in as_html.text
    good = requests.get(f"{datasette}/site/pages.json?_sort_desc=title&_timelimit=500&_size=2", timeout=30)
    assert good.status_code == 200 and len(good.json()["rows"]) == 2


def test_the_longest_page_the_content_job_takes_reads_through_datasette(tmp_path, limits):
    """A page file at content.MAX_FILE_BYTES, all plain words so its text is as long as its
    Markdown, is indexed, and its row reads and sorts within the 1 MiB value cap."""
    content = tmp_path / "content"
    (content / "pages").mkdir(parents=True)
    head = "---\ntitle: Long\nkind: page\npath: /long\n---\n"
    (content / "pages" / "long.md").write_text(head + "word " * ((MAX_FILE_BYTES - len(head)) // 5))
    assert MAX_FILE_BYTES - 5 < (content / "pages" / "long.md").stat().st_size <= MAX_FILE_BYTES
    (content / "resume.json").write_text('{"basics": {"name": "Owner"}}')
    settings = make_settings(tmp_path, content_dir=content)
    assert jobs.run_job(settings, "content")[0]
    with serving_datasette(settings.db_path) as base:
        table = requests.get(f"{base}/site/pages.json", params={"_sort_desc": "title", "_shape": "array"}, timeout=30)
        assert table.status_code == 200 and table.json()[0]["path"] == "/long", table.text[:300]
        assert len(table.json()[0]["body"]) + len(table.json()[0]["text"]) > MAX_FILE_BYTES * 2 - 100
        for column in ("body", "text"):  # a sort copies the row and its key: three page lengths
            ordered = sql(base, f"select * from pages order by {column} desc")
            assert ordered.status_code == 200 and ordered.json()[0]["path"] == "/long", ordered.text[:300]
        assert requests.get(f"{base}/site/pages", timeout=30).status_code == 200  # with facet suggestions


def test_links_take_the_scheme_caddy_forwards(datasette):
    """Caddy sends X-Forwarded-Proto from 127.0.0.1, which Datasette's server trusts: behind TLS its
    absolute links (next_url) are https, without force_https_urls, which would break http set-ups."""
    for scheme in ("https", "http"):
        r = requests.get(f"{datasette}/site/photos.json", params={"_size": "1"},
                         headers={"X-Forwarded-Proto": scheme}, timeout=30)
        assert r.json()["next_url"].startswith(f"{scheme}://127.0.0.1:"), r.json()["next_url"]


def test_photo_thumbnails_are_links_named_by_their_caption(datasette):
    """A thumbnail is its link's only content: an empty alt left the link with no name for a screen
    reader (html_audit25 F11). Each says the photo's caption, escaped, as the archive has it."""
    page = requests.get(f"{datasette}/site/photos", params={"_size": "max"}, timeout=30).text
    rows = requests.get(f"{datasette}/site/photos.json", params={"_shape": "array", "_size": "max"}, timeout=30).json()
    images = re.findall(r'<a href="/images/[^"]+"><img src="/images/[^"]+" alt="([^"]*)"', page)
    assert len(images) == 2 * len(rows) >= 20  # thumb_xs and thumb_small of each photo
    assert {html.unescape(alt) for alt in images} == {row["alt"] or row["stem"] for row in rows}  # no caption: its name
    assert any(not row["alt"] for row in rows) and all(images)
