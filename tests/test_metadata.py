"""metadata.yml documents every table and column Datasette shows, and its canned queries run."""
import re
import sqlite3

import yaml

from conftest import ROOT
from siteapi import db


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
    assert {"coffee_busy", "job_runs"} <= set(private) <= tables  # a misspelt name would guard nothing
    for table in private:
        assert site["tables"][table]["hidden"] is True and site["tables"][table]["allow"] is False, table
