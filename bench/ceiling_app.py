"""The stack's ceiling: a minimal Bottle app returning a constant JSON body, under the same
waitress settings as app.py (8 threads)."""
import os

import bottle
import waitress

app = bottle.Bottle()
BODY = b'{"query":"carburetor","total":0,"returned":0,"results":[]}'


@app.get("/const.json")
def const():
    bottle.response.content_type = "application/json"
    return BODY


if __name__ == "__main__":
    waitress.serve(app, host="127.0.0.1", port=int(os.environ["SITE_PORT"]), threads=8, ident="ceiling",
                   _quiet=True)
