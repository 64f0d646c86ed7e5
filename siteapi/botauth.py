"""Web Bot Auth: the site's own bot signs what it sends, and the site publishes the key.

Every request of the lens, the census and the venture-firm crawl carries an HTTP Message Signature
(RFC 9421, Ed25519) in the form of the Web Bot Auth architecture draft, so a site can tell our
fetches from anyone borrowing our User-Agent:

    Signature-Agent: "https://aadhar.sh"
    Signature-Input: sig1=("@authority" "signature-agent");created=...;keyid="<JWK thumbprint>";
                     alg="ed25519";expires=<created + 5 min>;nonce="<random>";tag="web-bot-auth"
    Signature: sig1=:<base64>:

The key that checks them is published as a JWKS at /.well-known/http-message-signatures-directory,
that answer itself signed (tag "http-message-signatures-directory", over the request's @authority).
The key id is the key's JWK SHA-256 thumbprint (RFC 7638).

The private key lives in `bot_key_file` (PEM; default var/bot-signing-key.pem). The first process
that needs it creates it, mode 0600, under a temporary name linked into place, so the app and the
jobs starting together end up with one key. Keep the file across deploys: sites cache directories.
When the file can be neither read nor created, requests go out unsigned and the directory is empty.
"""
from __future__ import annotations

import base64
import datetime
import hashlib
import json
import logging
import os
import secrets
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from http_message_signatures import HTTPMessageSigner, MappingKeyResolver, algorithms

from siteapi import files

log = logging.getLogger(__name__)

DIRECTORY_PATH = "/.well-known/http-message-signatures-directory"
DIRECTORY_TYPE = "application/http-message-signatures-directory+json"
REQUEST_TAG = "web-bot-auth"
DIRECTORY_TAG = "http-message-signatures-directory"
LIFETIME = datetime.timedelta(minutes=5)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def load_or_create_key(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 key in `path`, created there first if the file does not exist."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".bot-key-")  # mode 0600
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(pem)
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(temporary, path)
                files.sync_folder(path.parent)  # else a power loss can lose the name, and a new key is made
            except FileExistsError:
                pass  # another process linked its key first; everyone uses that one
        finally:
            os.unlink(temporary)
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} holds a {type(key).__name__}, not an Ed25519 private key")
    return key


class BotSigner:
    """Signs requests and the directory answer with one Ed25519 key (thread-safe)."""

    def __init__(self, key: Ed25519PrivateKey, agent_url: str):
        self.agent_url = agent_url
        public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64url(public)}
        self.key_id = b64url(hashlib.sha256(json.dumps(self.jwk, sort_keys=True, separators=(",", ":")).encode()).digest())
        self._signer = HTTPMessageSigner(signature_algorithm=algorithms.ED25519,
                                         key_resolver=MappingKeyResolver(public_keys={}, private_keys={self.key_id: key}))

    def directory(self) -> dict:
        return {"keys": [{**self.jwk, "kid": self.key_id}]}

    def _sign(self, message, label: str, tag: str, components: tuple[str, ...]) -> dict:
        created = datetime.datetime.now(datetime.timezone.utc)
        self._signer.sign(message, key_id=self.key_id, created=created, expires=created + LIFETIME,
                          nonce=b64url(secrets.token_bytes(32)), label=label, tag=tag,
                          covered_component_ids=components)
        return message.headers

    def request_headers(self, url: str) -> dict:
        """Signature-Agent, Signature-Input and Signature for a GET of `url`."""
        message = SimpleNamespace(method="GET", url=url, headers={"Signature-Agent": f'"{self.agent_url}"'})
        return self._sign(message, "sig1", REQUEST_TAG, ("@authority", "signature-agent"))

    def directory_headers(self, request_url: str) -> dict:
        """Signature-Input and Signature for the directory answer to a GET of `request_url`."""
        request = SimpleNamespace(method="GET", url=request_url, headers={})
        message = SimpleNamespace(status_code=200, headers={}, request=request)
        return self._sign(message, "binding0", DIRECTORY_TAG, ('"@authority";req',))


_signers: dict[tuple[Path, str], BotSigner | None] = {}
_signers_lock = threading.Lock()


def signer_for(settings) -> BotSigner | None:
    """The process's signer for these settings; None (unsigned) when the key cannot be had."""
    key = (settings.bot_key_file, settings.public_base_url)
    with _signers_lock:
        if key not in _signers:
            try:
                _signers[key] = BotSigner(load_or_create_key(settings.bot_key_file), settings.public_base_url)
            except (OSError, ValueError) as exc:
                log.warning("requests go out unsigned: bot key %s: %s", settings.bot_key_file, exc)
                _signers[key] = None
        return _signers[key]
