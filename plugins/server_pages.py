"""Datasette plugin: its pages that describe the server rather than the data are not served:
/-/databases (which names site.db's path on the server), /-/versions (the software and how SQLite
was built), /-/plugins (each plugin and its hooks) and /-/threads, as HTML or .json. Each answers
Datasette's 403 with a sentence instead (sec_audit24 #4). /-/settings and /-/metadata stay: they
describe the publication, and hold no path. SQL's way to the path, `pragma_database_list`, is
refused by plugins/private_tables.py.
"""
from datasette import hookimpl
from datasette.views.base import DatasetteError

PAGES = ("databases", "versions", "plugins", "threads")


def not_served(datasette, request):
    raise DatasetteError(f"{request.path} is not served: it describes the server, which stays private. The "
                         f"published data is at {datasette.urls.instance()}.", title="Forbidden", status=403)


@hookimpl
def register_routes():
    return [(rf"^/-/({'|'.join(PAGES)})(\.json)?$", not_served)]
