"""Datasette plugin: the tables listed under `plugins: private-tables: tables` of a database in
metadata.yml cannot be read at all, neither by browsing nor by ad-hoc SQL.

`hidden: true` only keeps a table off the database page and `allow: false` only closes the table's
own page; a SQL query still reads any table of the file. So every connection Datasette opens gets a
SQLite authorizer that refuses every column read of those tables: `select * from coffee_busy`
answers "access ... is prohibited", whatever join or subquery it hides behind. Counting rows reads
no column and stays allowed, so the database page still shows how many rows each table has.

The same authorizer refuses, on every database, the `dbstat` table (the page counts and payload
sizes of every table, private ones included), the `pragma_database_list` table (the file's path on
the server; Datasette's own `PRAGMA database_list` statement is not a read and still runs) and the
`fts3_tokenizer()` function, which this SQLite build enables: it returns a pointer into
libsqlite3 (defeating address randomisation) and registers any bytes as a tokenizer's function
pointer, one FTS3 table away from a call.

A refused read in a table page's `_where` is the 403 the private table's own page answers, with a
sentence saying what is refused and where the public tables are: Datasette's table view let the
authorizer's error through as a 500 (its query view answers SQL's refusal with a 400 of its own).
The private table's own page (`allow: false`) says the same, as JSON at its `.json` address: Datasette's
`forbidden` answer is an HTML page at every address, naming only the permission refused.
"""
import re
import sqlite3

from datasette import hookimpl
from datasette.handle_exception import handle_exception as render_error
from datasette.utils import tilde_decode
from datasette.views.base import DatasetteError

REFUSED_READ = re.compile(r"access to (.+)\.[^.]+ is prohibited")  # SQLite's words for SQLITE_DENY of a read


def _private(datasette, database) -> set[str]:
    config = datasette.plugin_config("private-tables", database=database, fallback=False) or {}
    return {str(name).lower() for name in config.get("tables", [])} | {"dbstat", "pragma_database_list"}


@hookimpl
def prepare_connection(conn, database, datasette):
    private = _private(datasette, database)

    def authorize(action, table, column, _schema, _trigger_or_view):
        if action == sqlite3.SQLITE_READ and column and (table or "").lower() in private:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION and (column or "").lower() == "fts3_tokenizer":  # column: the name
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    conn.set_authorizer(authorize)


def _refusal(datasette, request, table: str):
    database = request.url_vars.get("database")
    public = datasette.urls.path(database) if database else datasette.urls.instance()  # as the URL spells it
    return render_error(datasette, request, DatasetteError(
        f"{table} is a private table: no query may read it, not even a _where (its row count is public). "
        f"The public tables are listed at {public}.", title="Forbidden", status=403))


@hookimpl
def handle_exception(datasette, request, exception):
    refused = isinstance(exception, sqlite3.DatabaseError) and REFUSED_READ.fullmatch(str(exception))
    return _refusal(datasette, request, refused[1]) if refused else None


@hookimpl
def forbidden(datasette, request, message):
    table = tilde_decode(request.url_vars.get("table") or "")
    database = tilde_decode(request.url_vars.get("database") or "")
    return _refusal(datasette, request, table) if table.lower() in _private(datasette, database) else None
