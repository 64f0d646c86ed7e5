"""The stack's ceiling: a minimal Bottle app returning a constant JSON body, under app.py's
waitress options (siteapi.web.WAITRESS_OPTIONS: 8 threads, the trusted-proxy flags)."""
import os
import sys
from pathlib import Path

import bottle
import waitress

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from siteapi.web import WAITRESS_OPTIONS  # noqa: E402

app = bottle.Bottle()
BODY = b'{"query":"carburetor","total":0,"returned":0,"results":[]}'


@app.get("/const.json")
def const():
    bottle.response.content_type = "application/json"
    return BODY


if __name__ == "__main__":
    waitress.serve(app, port=int(os.environ["SITE_PORT"]), ident="ceiling", _quiet=True, **WAITRESS_OPTIONS)
