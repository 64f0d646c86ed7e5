"""Datasette plugin: the tables listed under `plugins: private-tables: tables` of a database in
metadata.yml cannot be read at all, neither by browsing nor by ad-hoc SQL.

`hidden: true` only keeps a table off the database page and `allow: false` only closes the table's
own page; a SQL query still reads any table of the file. So every connection Datasette opens gets a
SQLite authorizer that refuses every column read of those tables: `select * from coffee_busy`
answers "access ... is prohibited", whatever join or subquery it hides behind. Counting rows reads
no column and stays allowed, so the database page still shows how many rows each table has.

The same authorizer refuses, on every database, the `dbstat` table (the page counts and payload
sizes of every table, private ones included) and the `fts3_tokenizer()` function, which this
SQLite build enables: it returns a pointer into libsqlite3 (defeating address randomisation) and
registers any bytes as a tokenizer's function pointer, one FTS3 table away from a call.
"""
import sqlite3

from datasette import hookimpl


@hookimpl
def prepare_connection(conn, database, datasette):
    config = datasette.plugin_config("private-tables", database=database, fallback=False) or {}
    private = {str(name).lower() for name in config.get("tables", [])} | {"dbstat"}

    def authorize(action, table, column, _schema, _trigger_or_view):
        if action == sqlite3.SQLITE_READ and column and (table or "").lower() in private:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION and (column or "").lower() == "fts3_tokenizer":  # column: the name
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    conn.set_authorizer(authorize)
