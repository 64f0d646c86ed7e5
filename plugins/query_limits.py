"""Datasette plugin: bounds what one query can make Datasette hold in memory.

`sql_time_limit_ms` stops a query after a second but bounds neither a value nor the rows: a single
`select zeroblob(150000000)` answered a 900 MB body from a 4.5 GB process; with values capped at
1 MiB, 1,000 rows of `printf('%.*c', 1048000, char(1))`, made well within the second, still grew
Datasette to 24 GB, until the kernel killed it, while it wrote them as JSON (each control character
becomes a six-byte \\u escape, and the encoder holds several copies of the text). So every
connection gets three caps, and a query that passes one fails with a sentence instead of growing
the process:

- SQLite's length limit: no string, blob or sorted row over MAX_VALUE_BYTES, however it is made
  (zeroblob, randomblob, replace, group_concat and || fail; printf answers NULL);
- SQLite's column limit: no result wider than MAX_COLUMNS, so one row stays under 64 MiB;
- the rows one query returns hold at most MAX_RESULT_BYTES of text and blobs, counted as
  Datasette fetches them (at most 1,000 rows, `max_returned_rows`), text as Datasette's JSON writes
  it: a control character is six bytes there, so eight rows of a million char(1) are 48 MB of JSON,
  and a dozen callers asking for them at once grew Datasette past 1.4 GB when text counted as UTF-8.
"""
import sqlite3
import weakref
from json.encoder import encode_basestring_ascii

from datasette import hookimpl

# The largest thing site.db holds is a `pages` row, the page's Markdown plus its plain text: 5.8 KB
# today (tests/test_metadata.py measures it against these caps). The content job refuses a file over
# 256 KiB (siteapi/content.py MAX_FILE_BYTES), so a page's row, and a sort that copies it with its
# key, stays under this cap.
MAX_VALUE_BYTES = 1 << 20
# The widest table, `photos`, has 24 columns; Datasette's table pages add rowid.
MAX_COLUMNS = 64
# Every text and blob of the demo site.db together is under 600 KB. 8 MiB is one 50-row table page of 160 KB
# rows, or 1,000 rows of 8 KB; writing it as JSON grew Datasette by 250 MB at worst (control
# characters), 31 times the rows, which is why it is not larger.
MAX_RESULT_BYTES = 8 << 20


@hookimpl
def prepare_connection(conn):
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    conn.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, MAX_COLUMNS)
    make_row = conn.row_factory  # Datasette's sqlite3.Row
    fetched = weakref.WeakKeyDictionary()  # cursor -> bytes of text and blobs it has returned

    def counted_row(cursor, values):
        total = fetched.get(cursor, 0) + sum(json_length(v) for v in values if isinstance(v, (str, bytes)))
        if total > MAX_RESULT_BYTES:
            raise sqlite3.DataError(f"The rows of this query hold more than {MAX_RESULT_BYTES >> 20} MiB of text and "
                                    "blobs; select fewer rows or columns, or length() of a long value.")
        fetched[cursor] = total
        return make_row(cursor, values)

    conn.row_factory = counted_row


def json_length(value: str | bytes) -> int:
    """A text's length as Datasette's JSON writes it (ASCII, escaped, without its quotes); a blob's own."""
    return len(encode_basestring_ascii(value)) - 2 if isinstance(value, str) else len(value)
