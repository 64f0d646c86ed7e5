"""site.toml with SITE_* overrides, and a bad setting stopping start-up with one sentence."""
import subprocess
import sys

import pytest

from conftest import ROOT
from siteapi.config import SettingsError, load_settings


def test_environment_overrides_by_section_and_key(monkeypatch):
    monkeypatch.setenv("SITE_RATE_READ_Q", "7")
    monkeypatch.setenv("SITE_PUBLIC_BASE_URL", "http://127.0.0.1:9/")
    settings = load_settings(ROOT / "site.toml")
    assert settings.rates["read"].quota == 7
    assert settings.public_base_url == "http://127.0.0.1:9"
    assert settings.url("/x") == "http://127.0.0.1:9/x"


def test_secrets_only_from_environment(monkeypatch):
    monkeypatch.setenv("SITE_SPOTIFY_CLIENT_SECRET", "s3cret")
    assert load_settings(ROOT / "site.toml").secret("SPOTIFY_CLIENT_SECRET") == "s3cret"
    assert "secret" not in (ROOT / "site.toml").read_text().lower().split("#")[0]


@pytest.mark.parametrize("env, key", [
    ({"SITE_RATE_READ_Q": "lots"}, "SITE_RATE_READ_Q"),
    ({"SITE_RATE_INSPECT_W": "0"}, "SITE_RATE_INSPECT_W"),
    ({"SITE_PUBLIC_BASE_URL": "aadhar.sh"}, "public_base_url"),
    ({"SITE_SITE_HOST": "https://aadhar.sh/"}, "site_host"),
    ({"SITE_ORIGINALS_PUBLIC": "perhaps"}, "SITE_ORIGINALS_PUBLIC"),
])
def test_bad_setting_names_the_key(monkeypatch, env, key):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as err:
        load_settings(ROOT / "site.toml")
    assert key in str(err.value)


def test_bad_setting_stops_the_app_with_one_sentence():
    out = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env={"SITE_RATE_READ_Q": "x", "PATH": "/usr/bin"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1].startswith("app: Setting SITE_RATE_READ_Q must be a whole number")
