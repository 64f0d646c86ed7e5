"""The fetcher's https path against real loopback TLS servers: the connection is pinned to the checked
address while SNI, the certificate check and Host stay the name; certificates that do not cover the
name or come from an unknown CA are refused (by default too); the deadline covers a stalled
handshake; signed requests stay signed over TLS."""
from __future__ import annotations

import threading
import time

import pytest
import trustme

import lens_tls
import lens_web
from conftest import make_settings
from siteapi import botauth
from siteapi.lens.fetch import TIMEOUT_SENTENCE, FetchFailed


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


@pytest.fixture(scope="module")
def ca_file(ca, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tls") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture
def site(ca):
    with lens_tls.serving(lens_tls.LoopbackTls(ca)) as server:
        yield server


def fetcher(server, ca_file: str | None, **options):
    """Every test name resolves to 127.0.0.1; the policy allows only `server`'s port."""
    resolver = lens_web.StubResolver({name: ["127.0.0.1"] for name in ("shop.test", "rebind.test", "wrong.test")})
    return lens_web.loopback_fetcher(server, resolver, ca_certs=ca_file, **options)


def test_https_is_pinned_to_the_address_while_sni_and_host_stay_the_name(site, ca_file):
    result = fetcher(site, ca_file).fetch(site.url("/page"))
    assert result.status == 200 and result.body == lens_tls.PAGE
    assert site.server_names == ["shop.test"]
    assert [(path, headers["Host"]) for path, headers in site.seen] == [("/page", f"shop.test:{site.port}")]


def test_a_redirect_to_another_name_gets_a_handshake_for_that_name(site, ca_file):
    result = fetcher(site, ca_file).fetch(site.url("/to-rebind"))
    assert result.status == 200 and result.final_url == site.url("/page", host="rebind.test")
    assert site.server_names == ["shop.test", "rebind.test"]
    assert [headers["Host"] for _, headers in site.seen] == [f"shop.test:{site.port}", f"rebind.test:{site.port}"]


def test_a_redirect_to_http_is_followed_in_plain(site, ca_file):
    """The second hop speaks plain HTTP to the TLS-only port: the server sees an HTTP request where a
    handshake belongs and drops it, and the fetcher says so in a sentence."""
    with pytest.raises(FetchFailed, match="reset the connection|closed the connection"):
        fetcher(site, ca_file).fetch(site.url("/to-plain"))
    assert site.server_names == ["shop.test"] and site.failed_handshakes == ["HTTP_REQUEST"]


def test_a_certificate_that_does_not_cover_the_name_is_refused(site, ca_file):
    with pytest.raises(FetchFailed, match="TLS connection to wrong.test failed"):
        fetcher(site, ca_file).fetch(site.url("/page", host="wrong.test"))
    assert site.server_names == ["wrong.test"] and site.seen == []  # no request went out


def test_a_certificate_from_an_unknown_ca_is_refused(ca_file):
    with lens_tls.serving(lens_tls.LoopbackTls(trustme.CA())) as rogue:
        with pytest.raises(FetchFailed, match="TLS connection to shop.test failed"):
            fetcher(rogue, ca_file).fetch(rogue.url("/page"))
    assert rogue.seen == []


def test_the_default_trust_store_refuses_a_test_ca(site):
    with pytest.raises(FetchFailed, match="TLS connection to shop.test failed"):
        fetcher(site, ca_file=None).fetch(site.url("/page"))
    assert site.seen == []


def test_an_address_literal_is_checked_against_the_address_in_the_certificate(ca, site, ca_file):
    result = fetcher(site, ca_file).fetch(site.url("/page", host="127.0.0.1"))
    assert result.status == 200 and result.body == lens_tls.PAGE
    assert site.server_names == [None]  # an address is never sent as SNI
    assert site.seen[0][1]["Host"] == f"127.0.0.1:{site.port}"
    with lens_tls.serving(lens_tls.LoopbackTls(ca, names=("shop.test",))) as name_only:
        with pytest.raises(FetchFailed, match="TLS connection to 127.0.0.1 failed"):
            fetcher(name_only, ca_file).fetch(name_only.url("/page", host="127.0.0.1"))
    assert name_only.seen == []


def test_a_handshake_that_never_finishes_ends_at_the_deadline(ca_file):
    failures: list[str] = []

    def fetch():
        with pytest.raises(FetchFailed) as failed:
            fetcher(stall, ca_file, timeout_s=1).fetch(f"https://shop.test:{stall.port}/page")
        failures.append(str(failed.value))

    with lens_tls.serving(lens_tls.StallingListener()) as stall:
        started = time.monotonic()
        worker = threading.Thread(target=fetch, daemon=True)
        worker.start()
        worker.join(5)  # a hang fails the test here instead of stalling the suite
        elapsed = time.monotonic() - started
    assert failures == [TIMEOUT_SENTENCE.format(seconds=1)] and elapsed < 5
    assert len(stall.connections) == 1  # TCP connected; it was the handshake that hung


def test_signed_requests_carry_their_signature_over_tls(site, ca_file, tmp_path):
    signer = botauth.signer_for(make_settings(tmp_path))
    assert fetcher(site, ca_file, signer=signer).fetch(site.url("/page")).status == 200
    (_, headers), = site.seen
    assert headers["Signature-Agent"] == '"https://aadhar.sh"'
    assert headers["Signature"].startswith("sig1=:") and '"@authority"' in headers["Signature-Input"]
