"""Settings: `site.toml` read once into a frozen dataclass, with `SITE_*` environment overrides.

Every key in site.toml can be overridden as `SITE_` + the key in upper case, a section joining
with `_` (`[rate] read_q` -> `SITE_RATE_READ_Q`). The value is coerced to the type the key has in
site.toml. Secrets never live in the file: `Settings.secret("SPOTIFY_CLIENT_ID")` reads
`SITE_SPOTIFY_CLIENT_ID` from the environment. `SITE_CONFIG` points at another settings file.
A bad value raises SettingsError with one sentence naming the key.
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent


# Every policy a route or tool spends, (quota, window seconds); [rate] <name>_q / <name>_w override,
# and a <name>_q there declares a further one.
DEFAULT_RATES = {
    "read": (120, 60), "inspect": (30, 60), "compare": (4, 60), "ask_model": (20, 60),
    "representation_capture": (4, 60), "representation_compare": (8, 60),
}


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

    def section(self, name: str) -> Mapping[str, Any]:
        """A settings table added by a later area ([lens], [ask], [feeds] ...), read-only."""
        return self.sections.get(name, MappingProxyType({}))

    def secret(self, name: str) -> str | None:
        value = os.environ.get("SITE_" + name.upper(), "").strip()
        return value or None

    def url(self, path: str) -> str:
        """Absolute public URL for a site path."""
        return self.public_base_url + (path if path.startswith("/") else "/" + path)


def _coerce(key: str, default: Any, raw: str) -> Any:
    env = "SITE_" + key.upper().replace(".", "_")
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
        kind = {bool: "true or false", int: "a whole number", float: "a number"}[type(default)]
        raise SettingsError(f"Setting {env} must be {kind}, not {raw!r}.") from None
    return raw


def _apply_env(table: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            out[key] = _apply_env(value, dotted + ".")
            continue
        env = "SITE_" + dotted.upper().replace(".", "_")
        out[key] = _coerce(dotted, value, os.environ[env]) if env in os.environ else value
    return out


def _path(data: dict, key: str, base: Path) -> Path:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(f"Setting {key} must be a folder or file path (set it in site.toml or SITE_{key.upper()}).")
    path = Path(value).expanduser()
    return path if path.is_absolute() else (base / path)


def _positive(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SettingsError(f"Setting {name} must be a whole number of at least 1, not {value!r}.")
    return value


def load_settings(path: str | os.PathLike | None = None) -> Settings:
    config_path = Path(path or os.environ.get("SITE_CONFIG") or ROOT / "site.toml")
    try:
        data = tomllib.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SettingsError(f"Settings file {config_path} does not exist (set SITE_CONFIG to a site.toml).") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"Settings file {config_path} is not valid TOML: {exc}.") from None
    data = _apply_env(data)
    base = config_path.parent

    base_url = str(data.get("public_base_url", "")).rstrip("/")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SettingsError(f"Setting public_base_url must be an absolute http(s) URL, not {base_url!r}.")
    host = str(data.get("site_host", "")).strip().lower()
    if not host or "/" in host:
        raise SettingsError(f"Setting site_host must be a bare host name such as aadhar.sh, not {host!r}.")

    rate = data.get("rate", {})
    names = dict.fromkeys([*DEFAULT_RATES, *(key[:-2] for key in rate if key.endswith("_q"))])
    policies = {}
    for name in names:
        quota, window = DEFAULT_RATES.get(name, (None, 60))
        policies[name] = RatePolicy(
            name,
            _positive(f"SITE_RATE_{name.upper()}_Q", rate.get(f"{name}_q", quota)),
            _positive(f"SITE_RATE_{name.upper()}_W", rate.get(f"{name}_w", window)),
        )

    access_log = str(data.get("access_log", "")).strip()
    sections = {k: MappingProxyType(v) for k, v in data.items() if isinstance(v, dict) and k != "rate"}
    return Settings(
        site_name=str(data.get("site_name", host)),
        site_host=host,
        public_base_url=base_url,
        content_dir=_path(data, "content_dir", base),
        db_path=_path(data, "db_path", base),
        photos_dir=_path(data, "photos_dir", base),
        images_dir=_path(data, "images_dir", base),
        originals_public=bool(data.get("originals_public", True)),
        access_log=(Path(access_log) if Path(access_log).is_absolute() else base / access_log) if access_log else None,
        bot_key_file=_path(data, "bot_key_file", base) if "bot_key_file" in data else base / "var" / "bot-signing-key.pem",
        rates=MappingProxyType(policies),
        rate_storage=str(rate.get("storage", "memory://")),
        sections=MappingProxyType(sections),
    )
