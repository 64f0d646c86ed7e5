"""Datasette plugin: every request to Datasette spends one unit of the caller's `data` budget
([rate] data_q per data_w seconds) before Datasette runs anything, and its answer carries
`RateLimit-Policy` and `RateLimit` for `data`; past the budget the answer is the app's 429
(`rate_limited`, `Retry-After`, the JSON Error body of API.md 2.1). Datasette's static files
(/-/static/, /-/static-plugins/, the favicon), which its pages pull in, cost nothing and carry none.

60 a minute: one request may run its query for up to `sql_time_limit_ms` (a second), so a caller at the
limit keeps at most one of Datasette's three query threads busy on average. The budget bounds the
average, not the concurrency, so requests also take turns (`Turns`): at most RUNNING run their
queries at once, all callers together, and at most RUNNING_PER_CALLER of one caller's; the rest
wait (a coroutine each, no thread), and a freed turn goes first to the waiting caller with the
fewest running, so that a newcomer waits for one turn to end, not behind all the busy callers sent.
A turn ends when the answer starts (its queries are done; a streamed CSV's later pages run
outside), so a slow reader holds none. Without the total, a few callers each within budget kept
every query thread on one-second queries (a light page took 14 to 28 s) and each held a large
answer in memory at once (1.4 GB from twelve callers); tabs opened together are slower, not
refused. A person browsing spends one
a page (a table page with its facets and counts is one request; its CSS and scripts are free) and
reads for seconds between clicks, well under 60 a minute even when opening a few tabs at once. A
script paging through JSON with `_size=max` gets 1,000 rows a request, 60,000 rows a minute, while
the largest table of the demo site.db has 46 rows; past that, the 429 tells it how long to wait. The
app's `read` is twice this because its answers are cheap and bounded.

Counting is the app's own (siteapi.ratelimit: the caller by `address_key`, in the [rate] storage),
so with `storage = "redis://..."` Datasette's processes share counts, as the app's do.

The caller is `scope["client"]`. Datasette serves through uvicorn, which by default (proxy_headers
on; `FORWARDED_ALLOW_IPS` unset means 127.0.0.1 and ::1: uvicorn/config.py,
uvicorn/middleware/proxy_headers.py) replaces it with the address in X-Forwarded-For when the peer
is 127.0.0.1, as the app's waitress does (siteapi/serving.py), and ignores the header from any other
peer. Caddy sets that header to the address it saw, dropping a client's own, so each visitor behind
it has a budget of its own; nothing needs configuring (tests/test_datasette_rate.py proves both).
"""
import asyncio
import collections

from datasette import hookimpl

from siteapi.asgi import refuse, site_settings, unprefixed, wire
from siteapi.ratelimit import RateLimiter, address_key
from siteapi.web import rate_refusal

POLICY = "data"
FREE = (b"/-/static/", b"/-/static-plugins/")
RUNNING = 2  # of Datasette's three query threads: a table page runs some of its queries side by side
RUNNING_PER_CALLER = 2


class Turns:
    """Who may run a request now: at most `total` at once and `per_caller` of one caller's, the
    waiting caller with the fewest running served first and equals in rotation, each caller's
    requests in the order they came. One event loop."""

    def __init__(self, total: int, per_caller: int):
        self.total, self.per_caller = total, per_caller
        self.running: dict[str, int] = {}
        self.waiting: dict[str, collections.deque] = {}  # caller -> its waiting futures; dict order is the rotation

    async def take(self, caller: str) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(caller, collections.deque()).append(waiter)
        self._hand_out()
        try:
            await waiter
        except asyncio.CancelledError:  # the client left while it waited
            if waiter.done() and not waiter.cancelled():
                self.give_back(caller)
            elif waiter in self.waiting.get(caller, ()):
                self.waiting[caller].remove(waiter)
                if not self.waiting[caller]:
                    del self.waiting[caller]
            raise

    def give_back(self, caller: str) -> None:
        self.running[caller] -= 1
        if not self.running[caller]:
            del self.running[caller]
        self._hand_out()

    def _hand_out(self) -> None:
        while sum(self.running.values()) < self.total:
            # the fewest running first, so a newcomer goes before a busy caller's next; then rotation
            ready = [c for c in self.waiting if self.running.get(c, 0) < self.per_caller]
            if not ready:
                return
            caller = min(ready, key=lambda c: self.running.get(c, 0))
            queue = self.waiting.pop(caller)
            waiter = queue.popleft()
            if queue:
                self.waiting[caller] = queue  # to the end of the rotation
            if waiter.cancelled():  # its task is on its way out
                continue
            self.running[caller] = self.running.get(caller, 0) + 1
            waiter.set_result(None)


@hookimpl
def asgi_wrapper(datasette):
    settings = site_settings()
    limiter = RateLimiter({POLICY: settings.rates[POLICY]}, settings.rate_storage)
    shared = settings.rate_storage != "memory://"
    prefix = datasette.setting("base_url").encode()

    def free(scope) -> bool:
        path = unprefixed(scope, prefix)["raw_path"].partition(b"?")[0]  # as Datasette routes it (DatasetteRouter)
        return path.startswith(FREE) or path == b"/favicon.ico"

    turns = Turns(RUNNING, RUNNING_PER_CALLER)

    def wrap(app):
        async def limited(scope, receive, send):
            if scope["type"] != "http" or free(scope):
                return await app(scope, receive, send)
            caller = address_key((scope.get("client") or ("0.0.0.0",))[0])
            # A shared store's hit is a network round trip, which must not hold the event loop that
            # serves every other request; a memory hit (3 us) would cost 130 us more in a thread.
            decision = (await asyncio.to_thread(limiter.hit, POLICY, caller) if shared
                        else limiter.hit(POLICY, caller))
            if not decision.allowed:
                return await refuse(send, scope, rate_refusal(decision), settings, decision.headers())
            counted = wire(decision.headers())
            await turns.take(caller)
            held = True

            def turn_over():
                nonlocal held
                if held:
                    held = False
                    turns.give_back(caller)

            async def send_counted(message):
                if message["type"] == "http.response.start":
                    message = {**message, "headers": [*message.get("headers", []), *counted]}
                    turn_over()
                await send(message)

            try:
                return await app(scope, receive, send_counted)
            finally:
                turn_over()

        return limited

    return wrap
