"""Rate limits on the real server: exact under 8 concurrent threads, the 429's headers, and a
second caller unaffected. Callers are told apart by X-Forwarded-For from the trusted proxy."""
import dataclasses
from concurrent.futures import ThreadPoolExecutor

import requests

from app import make_app
from servers import serve_wsgi
from siteapi.config import RatePolicy


def test_quota_is_exact_under_concurrency(site_settings):
    settings = dataclasses.replace(site_settings, rates={**site_settings.rates, "read": RatePolicy("read", 25, 60)})
    with serve_wsgi(make_app(settings).wsgi) as base:
        def hit(_):
            return requests.get(base + "/search.json?q=garage", headers={"X-Forwarded-For": "203.0.113.7"}, timeout=30)

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(hit, range(40)))
        codes = [r.status_code for r in answers]
        assert codes.count(200) == 25 and codes.count(429) == 15

        refused = next(r for r in answers if r.status_code == 429)
        body = refused.json()
        assert body["code"] == "rate_limited" and "25 per 60 seconds" in body["error"]
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert refused.headers["RateLimit-Policy"] == '"read";q=25;w=60'
        assert refused.headers["RateLimit"].startswith('"read";r=0;t=')

        other = requests.get(base + "/search.json?q=garage", headers={"X-Forwarded-For": "198.51.100.9"}, timeout=30)
        assert other.status_code == 200 and other.headers["RateLimit"].startswith('"read";r=24;')


def test_untrusted_forwarded_for_is_ignored(site_settings):
    settings = dataclasses.replace(site_settings, rates={**site_settings.rates, "read": RatePolicy("read", 2, 60)})
    with serve_wsgi(make_app(settings).wsgi, trusted_proxy=None) as base:
        codes = [requests.get(base + "/robots.txt", headers={"X-Forwarded-For": f"192.0.2.{i}"}, timeout=30).status_code
                 for i in range(3)]
    assert codes == [200, 200, 429]  # spoofed addresses do not buy a fresh budget
