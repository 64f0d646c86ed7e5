"""Datasette plugin: Datasette writes no request lines. uvicorn logs each one with its query string
(the SQL, the search terms), which the privacy page says the site does not keep with or without an
address; Caddy's access log, which cuts query strings, is the one record of requests."""
import logging

from datasette import hookimpl


@hookimpl
def startup(datasette):
    # A filter, not `disabled`: uvicorn configures its loggers after this, which enables them again.
    logging.getLogger("uvicorn.access").addFilter(lambda record: False)
