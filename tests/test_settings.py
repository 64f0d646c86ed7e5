"""site.toml with SITE_* overrides, and a bad setting stopping start-up with one sentence."""
import subprocess
import sys

import pytest

import jobs
from conftest import ROOT
from siteapi import db
from siteapi.config import RatePolicy, SettingsError, load_settings


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
    ({"SITE_RATE_STORAGE": "bogus://x"}, "SITE_RATE_STORAGE"),
    ({"SITE_RATE_READ_W": "99999999999999999999"}, "SITE_RATE_READ_W"),
    ({"SITE_LENS_RATES": "Claude,GPT"}, "SITE_LENS_RATES"),  # a list of tables has no comma form
    ({"SITE_PUBLIC_BASE_URL": "https://aadhar.sh#top"}, "public_base_url"),
    ({"SITE_PORT": "http"}, "SITE_PORT"),
    ({"SITE_PORT": "99999"}, "SITE_PORT"),  # a socket would take it as 34463
    ({"SITE_LENS_TIMEOUT_S": "0"}, "SITE_LENS_TIMEOUT_S"),  # the [sections] are read at start-up too
    ({"SITE_ASK_DEADLINE_MS": "-1"}, "SITE_ASK_DEADLINE_MS"),
    ({"SITE_RATE_DATA_Q": "many"}, "SITE_RATE_DATA_Q"),  # Datasette's budget (plugins/rate_limit.py)
    ({"SITE_RATE_DATA_W": "0"}, "SITE_RATE_DATA_W"),
    # the photos job deletes in images_dir what no photo names: never in the originals' folder
    ({"SITE_PHOTOS_DIR": "/srv/photos", "SITE_IMAGES_DIR": "/srv/photos/"}, "images_dir"),
    ({"SITE_PHOTOS_DIR": "/srv/photos/originals", "SITE_IMAGES_DIR": "/srv/photos"}, "images_dir"),
    ({"SITE_PHOTOS_DIR": "/srv/photos", "SITE_IMAGES_DIR": "/srv/photos/public"}, "photos_dir"),
])
def test_bad_setting_names_the_key(monkeypatch, env, key):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as err:
        load_settings(ROOT / "site.toml")
    assert key in str(err.value)


def test_empty_rosters_from_the_environment_turn_the_outside_crawls_off(monkeypatch, tmp_path, capsys):
    """`SITE_FEEDS_AROUND_ROSTER= SITE_LENS_CENSUS_ROSTER= make run` crawls no outside site: an empty
    value is the one list of tables the environment can give, and an empty census roster means no
    census (the default roster is for a site.toml that leaves the key out). Both runs store nothing."""
    monkeypatch.setenv("SITE_DB_PATH", str(tmp_path / "site.db"))
    monkeypatch.setenv("SITE_FEEDS_AROUND_ROSTER", "")
    monkeypatch.setenv("SITE_LENS_CENSUS_ROSTER", " ")
    for job, said in (("around", "around_roster is empty; nothing crawled"),
                      ("census", "census_roster is empty; nothing scanned")):
        assert jobs.main(["run", job]) == 0
        assert said in capsys.readouterr().out
    conn = db.connect(tmp_path / "site.db", readonly=True)
    stored = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE name IN ('around_crawls', 'lens_census')")]
    assert all(conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0] == 0 for name in stored)
    conn.close()
    monkeypatch.setenv("SITE_FEEDS_AROUND_ROSTER", "Paradigm")
    with pytest.raises(SettingsError, match="only site.toml can hold"):
        load_settings(ROOT / "site.toml")


def test_overrides_of_keys_the_file_leaves_out_are_read(monkeypatch, tmp_path):
    """Keys read with no default of their own type had their SITE_* override ignored when site.toml
    left them out (style_review24 H4): a list of tables is refused as for a key the file names."""
    from siteapi.lens.cost import rates
    from siteapi.lens.settings import lens_settings
    toml = (ROOT / "site.toml").read_text()
    bare = tmp_path / "site.toml"
    bare.write_text("\n".join(line for line in toml.splitlines() if not line.startswith("rates_checked")))
    monkeypatch.setenv("SITE_CONFIG", str(bare))
    monkeypatch.setenv("SITE_LENS_RATES_CHECKED", "2027-01-01")
    assert rates(lens_settings(load_settings()))[1] == "2027-01-01"
    monkeypatch.setenv("SITE_FEEDS_AROUND_ROSTER", "https://x.example/")
    with pytest.raises(SettingsError, match="SITE_FEEDS_AROUND_ROSTER names a list of tables"):
        load_settings()


def test_the_rates_checked_date_may_be_written_as_a_toml_date_or_text(tmp_path):
    """The natural spelling, an unquoted TOML date, had stopped the app (review24 L2); text that is
    no date, which the lens would show as the prices' date, stops it with a sentence."""
    from siteapi.lens.settings import lens_settings
    line = next(line for line in (ROOT / "site.toml").read_text().splitlines() if line.startswith("rates_checked"))
    for written, shown in (("rates_checked = 2026-11-21", "2026-11-21"), ('rates_checked = "2026-11-21"', "2026-11-21")):
        assert lens_settings(load_settings(site_toml(tmp_path, line, written)))["rates_checked"] == shown
    for written in ('rates_checked = "last week"', 'rates_checked = "2026-02-30"', "rates_checked = 2026-11-21T08:00:00Z"):
        with pytest.raises(SettingsError, match=r"Setting \[lens\] rates_checked .*must be "):
            lens_settings(load_settings(site_toml(tmp_path, line, written)))


def test_bad_setting_stops_the_app_with_one_sentence():
    out = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env={"SITE_RATE_READ_Q": "x", "PATH": "/usr/bin"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1].startswith("app: Setting SITE_RATE_READ_Q must be a whole number")


def site_toml(tmp_path, old: str = "", new: str = ""):
    """The project's site.toml with `old` replaced by `new`, written to `tmp_path`."""
    text = (ROOT / "site.toml").read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "site.toml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


def test_keys_the_file_leaves_out_are_still_overridable(tmp_path, monkeypatch):
    path = site_toml(tmp_path, 'content_dir = "content"\n')
    path.write_text(path.read_text().split("\n[rate]\n")[0] + "\n", encoding="utf-8")  # no [rate] table at all
    monkeypatch.setenv("SITE_CONTENT_DIR", "/srv/content")
    monkeypatch.setenv("SITE_RATE_READ_Q", "7")
    monkeypatch.setenv("SITE_RATE_STORAGE", "memory://")
    settings = load_settings(path)
    assert str(settings.content_dir) == "/srv/content" and settings.rates["read"].quota == 7
    assert settings.rates["inspect"].quota == 30 and settings.rate_storage == "memory://"
    monkeypatch.setenv("SITE_PORT", "8123")
    assert load_settings(path).port == 8123 and load_settings(ROOT / "site.toml").port == 8123


def test_section_keys_the_file_leaves_out_are_overridable_too(tmp_path, monkeypatch):
    from siteapi import ranker
    from siteapi.feeds import coffee

    path = site_toml(tmp_path, "coffee_max_per_day = 3\n", "")
    monkeypatch.setenv("SITE_FEEDS_COFFEE_MAX_PER_DAY", "1")
    monkeypatch.setenv("SITE_FEEDS_COFFEE_MAX_AGE_SECONDS", "120")  # site.toml never lists it
    monkeypatch.setenv("SITE_ASK_DEADLINE_MS", "75.5")  # a key the file has: coerced to the file's int
    with pytest.raises(SettingsError, match=r"SITE_ASK_DEADLINE_MS must be a whole number, not '75.5'"):
        load_settings(path)
    monkeypatch.setenv("SITE_ASK_DEADLINE_MS", "75")
    settings = load_settings(path)
    rules = coffee.rules(settings)
    assert rules["per_day"] == 1 and rules["max_age"] == 120
    assert ranker.RankerSettings.from_settings(settings).deadline_ms == 75
    monkeypatch.setenv("SITE_FEEDS_COFFEE_MAX_AGE_SECONDS", "5")  # below its range, read at start-up
    with pytest.raises(SettingsError, match=r"\[feeds\] coffee_max_age_seconds \(SITE_FEEDS_COFFEE_MAX_AGE_SECONDS\)"):
        load_settings(path)


@pytest.mark.parametrize("old, new, key", [
    ("originals_public = true", 'originals_public = "false"', "originals_public"),  # a string is not a switch
    ("originals_public = true", "original_public = false", "original_public"),  # a misspelt key is not ignored
    ('site_name = "aadhar.sh"', "site_name = 5", "site_name"),
    ('access_log = "var/access.log"', 'access_log = ["var/access.log"]', "access_log"),
    ('public_base_url = "https://aadhar.sh"', 'public_base_url = "https://aadhar.sh:99999"', "public_base_url"),
    ('public_base_url = "https://aadhar.sh"', 'public_base_url = "https://aadhar.sh/?from=toml"', "public_base_url"),
    ('public_base_url = "https://aadhar.sh"', 'public_base_url = "https://aadhar .sh"', "public_base_url"),
    ('site_host = "aadhar.sh"', 'site_host = "aadhar sh"', "site_host"),
    ('content_dir = "content"', 'content_dir = "con\\u0000tent"', "content_dir"),
    ("[rate]\n", "rate = 5\n[rate_]\n", "rate"),
    ('storage = "memory://"', 'storage = "memcache://127.0.0.1"', "SITE_RATE_STORAGE"),
    ('storage = "memory://"', "storage = 6379", "SITE_RATE_STORAGE"),
    ("read_w = 60", "read_ww = 60", "read_ww"),  # nothing reads it
    ("[rate]\n", "[rate]\nfetch_w = 30\n", "fetch_w"),  # a window without its quota
    ("[rate]\n", '[rate]\n"my \\"policy_q" = 3\n', "policy_q"),  # not a Structured Field string in the header
    ("read_q = 120", "read_q = 10_000_000_000_000_000", "SITE_RATE_READ_Q"),  # past a Structured Field Integer
    ("read_q = 120", "read_q = 1.5", "SITE_RATE_READ_Q"),
    ("data_w = 60", "data_w = 0", "[rate] data_w (SITE_RATE_DATA_W)"),
    ("data_w = 60", 'data_w = "60"', "[rate] data_w (SITE_RATE_DATA_W)"),
    # [ask] and [lens] are read at start-up, not at the first question or scan
    ("temperature = 0.04", 'temperature = "0.04"', "[ask] temperature"),
    ("none_cosine = 0.33", "none_cosine = 2", "[ask] none_cosine"),
    ('model_path = "models/minilm-l6-v2-int8.onnx"', "model_path = false", "[ask] model_path"),
    ("\ntimeout_s = 8", "\ntimeout_s = 0", "[lens] timeout_s"),  # clamped to 1 s before, silently
    ("scan_concurrency = 16", 'scan_concurrency = "16"', "[lens] scan_concurrency"),  # the default before, silently
    ("dns_nameservers = []", 'dns_nameservers = "127.0.0.1"', "[lens] dns_nameservers"),
    ("cloudflare_timeout_s = 9", 'cloudflare_timeout_s = 9\ncensus_roster = ["https://example.com/", 5]',
     "[lens] census_roster"),
    ("usdPerMtok = 0.2", 'usdPerMtok = "0.2"', "[lens] rates"),  # dropped before, silently
    ("[ask]\n", "[asks]\ndeadline_ms = 9\n[ask]\n", "[asks]"),  # a misspelt section is not ignored
    # a misspelt key inside a section is not ignored either (its default stayed in force, unseen)
    ("deadline_ms = 250", "deadline = 250", "[ask] deadline"),
    ("\ntimeout_s = 8", "\ntimeout = 8", "[lens] timeout"),
    ("coffee_slot_minutes = 30", "coffee_slot_minute = 30", "[feeds] coffee_slot_minute"),
    # [feeds]: read by the jobs, whose first run came minutes after start-up
    ("coffee_slot_minutes = 30", 'coffee_slot_minutes = "30"', "[feeds] coffee_slot_minutes"),
    ("coffee_slot_minutes = 30", "coffee_slot_minutes = 0", "[feeds] coffee_slot_minutes"),
    ('coffee_timezone = "America/New_York"', 'coffee_timezone = "America/Nowhere"', "[feeds] coffee_timezone"),
    ('coffee_day_end = "18:00"', "coffee_day_end = 18", "[feeds] coffee_day_end"),
    ("ledger_rate_usd = 0.01", 'ledger_rate_usd = "1c"', "[feeds] ledger_rate_usd"),
    ("ledger_rate_usd = 0.01", 'ledger_rate_usd = 0.01\naround_roster = [{ name = "Topology" }]', "[feeds] around_roster"),
])
def test_bad_value_in_the_file_names_the_key(tmp_path, old, new, key):
    with pytest.raises(SettingsError) as err:
        load_settings(site_toml(tmp_path, old, new))
    assert key in str(err.value)


def test_datasette_has_a_budget_of_its_own(tmp_path, monkeypatch):
    """[rate] data, which plugins/rate_limit.py spends: 60 per 60 seconds in site.toml, and the same
    when the file leaves it out."""
    monkeypatch.delenv("SITE_RATE_DATA_Q", raising=False)  # conftest raises it for the tests' Datasettes
    lines = (ROOT / "site.toml").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "site.toml").write_text("".join(line for line in lines if not line.startswith("data_")))
    for path in (ROOT / "site.toml", tmp_path / "site.toml"):
        assert load_settings(path).rates["data"] == RatePolicy("data", 60, 60), path
    monkeypatch.setenv("SITE_RATE_DATA_Q", "5")
    assert load_settings(tmp_path / "site.toml").rates["data"] == RatePolicy("data", 5, 60)


def test_an_unreadable_settings_file_is_one_sentence(tmp_path):
    (tmp_path / "latin1.toml").write_bytes('site_name = "caf\xe9"\n'.encode("latin-1"))
    for path in (tmp_path, tmp_path / "latin1.toml"):
        with pytest.raises(SettingsError) as err:
            load_settings(path)
        assert str(path) in str(err.value)


def test_a_storage_the_limiter_cannot_use_stops_the_app_with_one_sentence():
    out = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env={"SITE_RATE_STORAGE": "memcache://x", "PATH": "/usr/bin"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("app: Setting [rate] storage (SITE_RATE_STORAGE) must be")
