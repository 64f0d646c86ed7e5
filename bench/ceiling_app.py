"""The stack's ceiling: a minimal Bottle app returning a constant JSON body, under app.py's
waitress server (siteapi.serving: 8 threads, the trusted-proxy flags, send_bytes)."""
import os
import sys
from pathlib import Path

import bottle

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from siteapi import serving  # noqa: E402

app = bottle.Bottle()
BODY = b'{"query":"carburetor","total":0,"returned":0,"results":[]}'


@app.get("/const.json")
def const():
    bottle.response.content_type = "application/json"
    return BODY


if __name__ == "__main__":
    serving.create_server(app, port=int(os.environ["SITE_PORT"]), ident="ceiling").run()
