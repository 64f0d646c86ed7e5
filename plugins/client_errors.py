"""Datasette plugin: a bad table parameter answers 400 with what to send instead, not 500.

Datasette 0.65 answers 500 ("Cannot sort table by nope", a Python JSON or int error) to a
`_sort`/`_sort_desc` naming no sortable column, to both at once, to a `_through` that is not its
JSON object and to a `_timelimit` that is not a number. Those are the caller's mistakes; they are
rendered by Datasette's own error page (HTML or JSON), with status 400 and a sentence.
"""
import json

from datasette import hookimpl
from datasette.handle_exception import handle_exception as render_error
from datasette.views.base import DatasetteError

SORT = ("_sort and _sort_desc take one of the table's sortable columns (its column headings link to them), "
        "one at a time.")
THROUGH = ('_through takes a JSON object such as {"table": "...", "column": "...", "value": "..."} naming '
           "a table with a foreign key to this one.")
TIMELIMIT = "_timelimit takes a whole number of milliseconds."


def _sentence(request, exception):
    if isinstance(exception, DatasetteError) and exception.status == 500:
        if exception.message.startswith(("Cannot sort table by", "Cannot use _sort and _sort_desc")):
            return f"{exception.message}. {SORT}"
        if exception.message.startswith("Invalid _through"):
            return THROUGH
    if isinstance(exception, json.JSONDecodeError) and "_through" in request.args:
        return THROUGH
    if isinstance(exception, ValueError) and "_timelimit" in request.args:
        try:
            int(request.args["_timelimit"])
        except ValueError:
            return TIMELIMIT
    return None


@hookimpl
def handle_exception(datasette, request, exception):
    sentence = _sentence(request, exception)
    if sentence is None:
        return None  # Datasette's own handler answers
    return render_error(datasette, request, DatasetteError(sentence, title="Bad request", status=400))
