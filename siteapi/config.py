"""Settings: `site.toml` read once into a frozen dataclass, with `SITE_*` environment overrides.

Every key in site.toml, and every key read here or through option() that the file leaves out, can
be overridden as `SITE_` + the key in upper case, a section joining with `_` (`[rate] read_q` ->
`SITE_RATE_READ_Q`). The value is coerced to the type the key has in site.toml (or to its
default's, when the file leaves it out). Secrets never live in the file:
`Settings.secret("SPOTIFY_CLIENT_ID")` reads `SITE_SPOTIFY_CLIENT_ID` from the environment.
`SITE_CONFIG` points at another settings file. A bad value raises SettingsError with one sentence
naming the key.
"""
from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterator, Mapping
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
DATASETTE_PATH = "/data/"  # where Caddy mounts Datasette (its base_url); the Caddyfile says the same


# Every policy a route or tool spends, (quota, window seconds); [rate] <name>_q / <name>_w override,
# and a <name>_q there declares a further one. `data` is Datasette's (plugins/rate_limit.py).
DEFAULT_RATES = {
    "read": (120, 60), "inspect": (30, 60), "compare": (4, 60), "ask_model": (20, 60),
    "representation_capture": (4, 60), "representation_compare": (8, 60), "data": (60, 60),
}


# The top-level keys and [rate] keys read here, each with the type an environment override is read
# as when site.toml leaves the key out (an override of a key the file has takes the file's type).
KNOWN = {"site_name": "", "site_host": "", "public_base_url": "", "content_dir": "", "db_path": "", "photos_dir": "",
         "images_dir": "", "originals_public": True, "access_log": "", "bot_key_file": "", "port": 0,
         "rate": {"storage": "", **{f"{name}_{part}": 0 for name in DEFAULT_RATES for part in "qw"}}}
POLICY_NAME = re.compile(r"[a-z][a-z0-9_]*")  # a Structured Field string in the headers, and SITE_RATE_<NAME>_Q
SF_INTEGER_MAX = 999_999_999_999_999  # RFC 9651: the largest q and w the RateLimit headers can carry


_OPTION_TYPES = {bool: bool, int: int, float: (int, float), str: str, list: (list, tuple)}
_OPTION_KINDS = {bool: "true or false", int: "a whole number", float: "a number", str: "text in quotes", list: "a list"}


class SettingsError(ValueError):
    """A setting is missing or malformed; the message names the key."""


@dataclass(frozen=True)
class RatePolicy:
    name: str
    quota: int
    window: int


@dataclass(frozen=True)
class Settings:
    site_name: str
    site_host: str
    public_base_url: str
    content_dir: Path
    db_path: Path
    photos_dir: Path
    images_dir: Path
    originals_public: bool
    access_log: Path | None
    bot_key_file: Path
    rates: Mapping[str, RatePolicy]
    rate_storage: str
    sections: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    port: int = 8000  # the app's loopback port behind Caddy (SITE_PORT, which the Caddyfile reads too)

    def section(self, name: str) -> Mapping[str, Any]:
        """`[name]` of site.toml ([lens], [ask], [feeds] ...) with its SITE_* overrides, read-only; empty when absent."""
        return self.sections.get(name, MappingProxyType({}))

    def secret(self, name: str) -> str | None:
        value = os.environ.get("SITE_" + name.upper(), "").strip()
        return value or None

    def url(self, path: str) -> str:
        """Absolute public URL for a site path."""
        return self.public_base_url + (path if path.startswith("/") else "/" + path)


def option(settings: "Settings | None", section: str, key: str, default: Any, low: float | None = None,
           high: float | None = None) -> Any:
    """`[section] key` (or its SITE_ override, also when the file leaves the key out), `default` when
    it is absent or there are no settings.

    The value must have the default's type (a whole number does for a float) and lie within
    low..high; otherwise SettingsError names the key.
    """
    table = settings.section(section) if settings is not None else {}
    if key in table:
        value = table[key]
    elif settings is not None and f"SITE_{section.upper()}_{key.upper()}" in os.environ:
        value = _coerce(f"{section}.{key}", default, os.environ[f"SITE_{section.upper()}_{key.upper()}"])
    else:
        return default
    number = isinstance(default, (int, float)) and not isinstance(default, bool)
    usable = isinstance(value, _OPTION_TYPES[type(default)]) and isinstance(value, bool) == isinstance(default, bool)
    if usable and number:
        usable = math.isfinite(value) and (low is None or value >= low) and (high is None or value <= high)
    if not usable:
        kind = _OPTION_KINDS[type(default)] + (f" from {low:g} to {high:g}" if number and None not in (low, high) else "")
        raise SettingsError(f"Setting [{section}] {key} (SITE_{section.upper()}_{key.upper()}) must be {kind}, "
                            f"not {value!r}.")
    return float(value) if isinstance(default, float) else value


def _coerce(key: str, default: Any, raw: str) -> Any:
    env = "SITE_" + key.upper().replace(".", "_")
    if isinstance(default, list) and default and all(isinstance(item, dict) for item in default):
        if not raw.strip():
            return []  # the one list of tables the environment can give: none (no outside crawls)
        raise SettingsError(f"Setting {env} names a list of tables, which only site.toml can hold; unset it "
                            "and edit the file (or set it empty for none).")
    try:
        if isinstance(default, bool):
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, list):
            return [item.strip() for item in raw.split(",") if item.strip()]
    except ValueError:
        kind = _OPTION_KINDS[type(default)]
        raise SettingsError(f"Setting {env} must be {kind}, not {raw!r}.") from None
    return raw


def _apply_env(table: dict, known: dict, prefix: str = "") -> dict:
    """`table` with its SITE_* overrides, and the overrides of KNOWN keys the file leaves out."""
    out = {}
    for key in dict.fromkeys([*table, *known]):
        dotted = f"{prefix}{key}"
        value = table.get(key, known.get(key))
        if isinstance(value, dict):
            nested = known[key] if isinstance(known.get(key), dict) else {}
            out[key] = _apply_env(table.get(key, {}), nested, dotted + ".")
            continue
        env = "SITE_" + dotted.upper().replace(".", "_")
        if env in os.environ:
            out[key] = _coerce(dotted, value, os.environ[env])
        elif key in table:
            out[key] = value
    return out


def _text(data: dict, key: str, default: str = "") -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise SettingsError(f"Setting {key} must be text in quotes, not {value!r}.")
    return value.strip()


def _path(data: dict, key: str, base: Path) -> Path:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise SettingsError(f"Setting {key} must be a folder or file path (set it in site.toml or SITE_{key.upper()}).")
    path = Path(value).expanduser()
    return path if path.is_absolute() else (base / path)


def _positive(key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= SF_INTEGER_MAX:
        raise SettingsError(f"Setting [rate] {key} (SITE_RATE_{key.upper()}) must be a whole number from 1 to "
                            f"{SF_INTEGER_MAX}, not {value!r}.")
    return value


def _policies(rate: Any) -> dict[str, RatePolicy]:
    if not isinstance(rate, dict):
        raise SettingsError(f"Setting rate must be the [rate] table of <policy>_q and <policy>_w, not {rate!r}.")
    names = dict.fromkeys([*DEFAULT_RATES, *(key[:-2] for key in rate if key.endswith("_q"))])
    for key in rate:
        name, part = key[:-2], key[-2:]
        if key != "storage" and not (part in ("_q", "_w") and name in names and POLICY_NAME.fullmatch(name)):
            raise SettingsError(f"Setting [rate] {key} is not a rate setting: a policy is <name>_q (requests) with "
                                "an optional <name>_w (window seconds), <name> in lower-case letters, digits and _.")
    policies = {}
    for name in names:
        quota, window = DEFAULT_RATES.get(name, (None, 60))
        policies[name] = RatePolicy(
            name,
            _positive(f"{name}_q", rate.get(f"{name}_q", quota)),
            _positive(f"{name}_w", rate.get(f"{name}_w", window)),
        )
    return policies


def _rate_storage(url: Any) -> str:
    """memory://, or a storage URL the `limits` library counts moving windows in (redis://...)."""
    if url == "memory://":
        return url
    from limits.storage import MovingWindowSupport, storage_from_string

    try:
        usable = isinstance(url, str) and isinstance(storage_from_string(url), MovingWindowSupport)
    except Exception:  # an unknown scheme, a malformed URL, or the scheme's client library missing
        usable = False
    if not usable:
        raise SettingsError(f"Setting [rate] storage (SITE_RATE_STORAGE) must be memory:// or a URL the limits "
                            f"library can count moving windows in with its client installed, such as "
                            f"redis://127.0.0.1:6379, not {url!r}.")
    return url


SECTIONS = ("ask", "lens", "feeds")


class _Watched(Mapping):
    """A [section] table that remembers which keys its readers asked for."""

    def __init__(self, table: Mapping[str, Any]):
        self.table, self.asked = table, set()

    def __getitem__(self, key: str) -> Any:
        self.asked.add(key)
        return self.table[key]

    def __contains__(self, key: object) -> bool:
        self.asked.add(key)
        return key in self.table

    def __iter__(self) -> Iterator[str]:
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)


def check_sections(settings: Settings) -> None:
    """Read every [section] setting once, as its area will, so a bad one stops start-up with its
    sentence instead of failing the first request or job that reads it (or being replaced unseen);
    a key no area asked for is a misspelling, which would otherwise leave its default in force."""
    # Imported here: each area imports this module for option() and SettingsError.
    from siteapi import ranker, ratelimit
    from siteapi.feeds import around, coffee, ledger, tracks
    from siteapi.lens import census, cost
    from siteapi.lens.settings import lens_settings, scan_settings

    for name in settings.sections:
        if name not in SECTIONS:
            raise SettingsError(f"Setting [{name}] is not a section this site reads; the sections are "
                                f"{', '.join(f'[{s}]' for s in ('rate', *SECTIONS))}.")
    watched = {name: _Watched(table) for name, table in settings.sections.items()}
    settings = replace(settings, sections=watched)
    ranker.RankerSettings.from_settings(settings)
    cost.rates(lens_settings(settings))
    scan_settings(settings)
    census.roster(settings)
    coffee.rules(settings)
    tracks.config(settings)
    around.roster(settings)
    ledger.options(settings)
    ratelimit.lens_work_slots(settings)
    ratelimit.lens_target_budget(settings)
    for name, table in watched.items():
        for key in table:
            if key not in table.asked:
                raise SettingsError(f"Setting [{name}] {key} is not one this site reads; check its spelling (the "
                                    f"[{name}] keys are {', '.join(sorted(table.asked))}).")


def load_settings(path: str | os.PathLike | None = None) -> Settings:
    config_path = Path(path or os.environ.get("SITE_CONFIG") or ROOT / "site.toml")
    try:
        data = tomllib.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SettingsError(f"Settings file {config_path} does not exist (set SITE_CONFIG to a site.toml).") from None
    except OSError as exc:
        raise SettingsError(f"Settings file {config_path} cannot be read: {exc.strerror}.") from None
    except UnicodeDecodeError:
        raise SettingsError(f"Settings file {config_path} is not UTF-8 text.") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"Settings file {config_path} is not valid TOML: {exc}.") from None
    for key, value in data.items():
        if key not in KNOWN and not isinstance(value, dict):
            raise SettingsError(f"Setting {key} is not one this site reads; check its spelling, or move it under "
                                "the [section] it belongs to.")
    data = _apply_env(data, KNOWN)
    base = config_path.parent

    base_url = _text(data, "public_base_url").rstrip("/")
    parts = urlsplit(base_url)
    try:
        usable = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 0) >= 0
    except ValueError:  # `port` raises on one that is not a number from 0 to 65535
        usable = False
    if not usable or parts.query or parts.fragment or re.search(r"\s", base_url):
        raise SettingsError(f"Setting public_base_url must be an absolute http(s) URL such as https://aadhar.sh, "
                            f"not {base_url!r}.")
    host = _text(data, "site_host").lower()
    if not host or re.search(r"[\s/@?#]", host):
        raise SettingsError(f"Setting site_host must be a bare host name such as aadhar.sh, not {host!r}.")
    originals_public = data.get("originals_public", True)
    if not isinstance(originals_public, bool):
        raise SettingsError(f"Setting originals_public must be true or false, not {originals_public!r}.")
    port = data.get("port", 8000)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise SettingsError(f"Setting port (SITE_PORT) must be a TCP port from 1 to 65535, not {port!r}.")

    rate = data.get("rate", {})
    policies = _policies(rate)
    access_log = _text(data, "access_log")
    sections = {k: MappingProxyType(v) for k, v in data.items() if isinstance(v, dict) and k != "rate"}
    settings = Settings(
        site_name=_text(data, "site_name", host) or host,
        site_host=host,
        public_base_url=base_url,
        content_dir=_path(data, "content_dir", base),
        db_path=_path(data, "db_path", base),
        photos_dir=_path(data, "photos_dir", base),
        images_dir=_path(data, "images_dir", base),
        originals_public=originals_public,
        access_log=(Path(access_log) if Path(access_log).is_absolute() else base / access_log) if access_log else None,
        bot_key_file=_path(data, "bot_key_file", base) if "bot_key_file" in data else base / "var" / "bot-signing-key.pem",
        rates=MappingProxyType(policies),
        rate_storage=_rate_storage(rate.get("storage", "memory://")),
        sections=MappingProxyType(sections),
        port=port,
    )
    photos, images = settings.photos_dir.resolve(), settings.images_dir.resolve()
    if photos == images or photos in images.parents or images in photos.parents:
        raise SettingsError(f"Settings photos_dir ({photos}) and images_dir ({images}) must be two separate folders, "
                            "neither inside the other: the photos job only reads the originals in photos_dir, "
                            "and writes and deletes thumbnails and copies in images_dir.")
    check_sections(settings)
    return settings
