"""Web Bot Auth: the key file, the published directory, and the signatures a site receives, checked
the way a site would check them (RFC 9421 verifier, keys from the live directory) and once more by
rebuilding the signature base by hand."""
from __future__ import annotations

import base64
import dataclasses
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import threading
from types import SimpleNamespace

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from http_message_signatures import HTTPMessageVerifier, InvalidSignature, MappingKeyResolver, algorithms

import lens_web
from conftest import ROOT, make_settings
from siteapi import botauth, db
from siteapi.lens.fetch import fetcher_from_settings


def verify(message, jwks: dict, tag: str):
    """Verify as a site would: Ed25519 public keys by keyid, from the JWKS it fetched."""
    keys = {k["kid"]: Ed25519PublicKey.from_public_bytes(base64.urlsafe_b64decode(k["x"] + "=="))
            for k in jwks["keys"] if k.get("kty") == "OKP" and k.get("crv") == "Ed25519"}
    verifier = HTTPMessageVerifier(signature_algorithm=algorithms.ED25519,
                                   key_resolver=MappingKeyResolver(public_keys=keys, private_keys={}))
    (result,) = verifier.verify(message, expect_tag=tag, max_age=botauth.LIFETIME)
    return result


@pytest.fixture
def directory(api):
    r = api.get(botauth.DIRECTORY_PATH)  # validated against /openapi.json
    assert r.status_code == 200
    return r


def test_the_directory_is_a_signed_jwks(directory, site_settings):
    assert directory.headers["Content-Type"] == botauth.DIRECTORY_TYPE
    (key,) = directory.json()["keys"]
    assert key["kty"] == "OKP" and key["crv"] == "Ed25519" and len(base64.urlsafe_b64decode(key["x"] + "=")) == 32
    result = verify_directory(directory, site_settings.public_base_url)
    assert result.label == "binding0" and result.parameters["keyid"] == key["kid"]
    assert '"@authority";req' in directory.headers["Signature-Input"]


def verify_directory(answer, origin: str):
    request = SimpleNamespace(method="GET", url=origin + botauth.DIRECTORY_PATH, headers={})
    return verify(SimpleNamespace(status_code=200, headers=answer.headers, request=request), answer.json(),
                  botauth.DIRECTORY_TAG)


def test_the_directory_is_signed_for_the_site_whatever_host_is_asked(api, site_settings):
    """Signed for the request's Host, the directory would vouch for any name a client sends."""
    asked = api.get(botauth.DIRECTORY_PATH, headers={"Host": "attacker.example"})
    assert verify_directory(asked, site_settings.public_base_url).label == "binding0"
    with pytest.raises(InvalidSignature):
        verify_directory(asked, "https://attacker.example")


def test_every_hop_is_signed_for_its_own_authority(site_settings, directory):
    """The production fetcher's signer, through a redirect from shop.test to rebind.test: a site that
    checks Web Bot Auth accepts both requests with the key the directory publishes."""
    web, thread = lens_web.start()
    try:
        resolver = lens_web.StubResolver({"shop.test": ["127.0.0.1"], "rebind.test": ["127.0.0.1"]})
        fetcher = lens_web.loopback_fetcher(web, resolver, signer=fetcher_from_settings(site_settings).signer)
        assert fetcher.fetch(web.url("/to-rebind")).status == 200
    finally:
        lens_web.stop(web, thread)
    assert [path for path, _ in web.seen] == ["/to-rebind", "/rich"]
    nonces = set()
    for (path, headers), host in zip(web.seen, ("shop.test", "rebind.test")):
        url = f"http://{headers['Host']}{path}"
        result = verify(SimpleNamespace(method="GET", url=url, headers=headers), directory.json(), botauth.REQUEST_TAG)
        params = result.parameters
        assert headers["Signature-Agent"] == '"https://aadhar.sh"' and result.label == "sig1"
        assert params["keyid"] == directory.json()["keys"][0]["kid"] and params["alg"] == "ed25519"
        assert params["expires"] - params["created"] == 300
        assert result.covered_components['"@authority"'] == f"{host}:{web.port}"
        nonces.add(params["nonce"])
    assert len(nonces) == 2  # a fresh nonce per request


def test_the_signature_base_rebuilt_by_hand(tmp_path):
    """RFC 9421 §2.5 without the library: the lines a verifier signs over, checked with the raw key."""
    signer = botauth.signer_for(make_settings(tmp_path))
    headers = signer.request_headers("https://Example.COM:443/some/path?q=1")
    params = re.fullmatch(r"sig1=(.*)", headers["Signature-Input"]).group(1)
    assert params.startswith('("@authority" "signature-agent");created=')
    base = f'"@authority": example.com\n"signature-agent": {headers["Signature-Agent"]}\n"@signature-params": {params}'
    signature = base64.b64decode(re.fullmatch(r"sig1=:(.*):", headers["Signature"]).group(1))
    raw = base64.urlsafe_b64decode(signer.directory()["keys"][0]["x"] + "=")
    Ed25519PublicKey.from_public_bytes(raw).verify(signature, base.encode())  # raises when it does not match
    with pytest.raises(Exception):
        Ed25519PublicKey.from_public_bytes(raw).verify(signature, base.replace("example.com", "example.org").encode())


def test_the_key_is_made_once_private_and_shared_by_racing_processes(tmp_path):
    path = tmp_path / "var" / "bot-signing-key.pem"
    keys, barrier = [], threading.Barrier(8)

    def make():
        barrier.wait()
        keys.append(botauth.load_or_create_key(path))

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    publics = {botauth.BotSigner(k, "https://aadhar.sh").key_id for k in keys}
    assert len(publics) == 1 and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["bot-signing-key.pem"]  # no temporary file left
    assert botauth.BotSigner(botauth.load_or_create_key(path), "https://aadhar.sh").key_id in publics


def test_without_a_usable_key_requests_go_out_unsigned(tmp_path, caplog):
    (tmp_path / "not-a-folder").write_text("x")
    settings = dataclasses.replace(make_settings(tmp_path), bot_key_file=tmp_path / "not-a-folder" / "key.pem")
    assert botauth.signer_for(settings) is None and fetcher_from_settings(settings).signer is None
    assert "unsigned" in caplog.text
    (tmp_path / "ec").mkdir()
    other_kind = make_settings(tmp_path / "ec")
    other_kind.bot_key_file.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    assert botauth.signer_for(other_kind) is None  # a key of another kind is refused, not used


def test_an_older_site_db_gains_the_signed_with_column(tmp_path):
    path = tmp_path / "site.db"
    old = sqlite3.connect(path)  # a site.db from before signed_with
    old.execute("CREATE TABLE around_crawls (id INTEGER PRIMARY KEY, crawled_at TEXT NOT NULL, crawled_by TEXT NOT NULL,"
                " target_count INTEGER NOT NULL, elapsed_ms INTEGER NOT NULL)")
    old.execute("INSERT INTO around_crawls VALUES (1, '2026-11-01T05:41:00Z', 'AadharshBot/1.0', 20, 900)")
    old.commit()
    old.close()
    conn = db.writer(path)
    assert dict(conn.execute("SELECT * FROM around_crawls").fetchone()) == {
        "id": 1, "crawled_at": "2026-11-01T05:41:00Z", "crawled_by": "AadharshBot/1.0", "target_count": 20,
        "elapsed_ms": 900, "signed_with": None}


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_clean_keeps_the_signing_key(tmp_path):
    """The key is the bot's identity to the sites that cached its directory; the rest of var/ goes."""
    shutil.copy(ROOT / "Makefile", tmp_path)
    (tmp_path / "var" / "rolled").mkdir(parents=True)
    for name in ("var/bot-signing-key.pem", "var/access.log", "var/rolled/access-1.log.gz", "site.db"):
        (tmp_path / name).write_text("x")
    subprocess.run(["make", "clean"], cwd=tmp_path, check=True, capture_output=True, timeout=60)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "Makefile", "var", "var/bot-signing-key.pem"]
