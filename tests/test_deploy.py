"""The systemd units in deploy/ start the app, the jobs, Datasette and Caddy as `make run` does
(siteapi/stack.py), on the ports and folders the Caddyfile expects, so what the tests prove of the
one holds for the other."""
import re
import shlex
from pathlib import Path

from conftest import ROOT, make_settings
from siteapi.config import load_settings
from siteapi.stack import DEFAULT_PORTS, commands_and_env, datasette_command


def exec_start(unit: str) -> list[str]:
    text = (ROOT / "deploy" / unit).read_text()
    line = re.search(r"^ExecStart=(.*?)(?<!\\)$", text, re.M | re.S)[1]
    return shlex.split(line.replace("\\\n", " "))


def options(argv: list[str]) -> dict[str, str]:
    """`--setting k v` as {k: v}; `--flag value` as {--flag: value}; paths by their last parts."""
    found, rest = {}, iter(argv)
    for arg in rest:
        if arg == "--setting":
            key = next(rest)
            found[key] = next(rest)
        elif arg.startswith("--"):
            found[arg] = next(rest)
    for flag in ("--metadata", "--plugins-dir"):
        found[flag] = Path(found[flag]).name
    return found


def test_the_datasette_unit_runs_what_make_run_runs():
    unit = exec_start("site-datasette.service")
    assert unit[1:3] == ["serve", "site.db"]
    assert options(unit[3:]) == options(datasette_command(Path("site.db"), 8001)[4:])


def test_the_datasette_unit_is_bounded_in_memory_and_restarts():
    text = (ROOT / "deploy" / "site-datasette.service").read_text()
    assert re.search(r"^MemoryMax=\d+[MG]$", text, re.M) and re.search(r"^Restart=on-failure$", text, re.M)
    # read-only, it starts once the scheduler holds site.db open (test_durability), and never gives up before
    assert re.search(r"^After=.*\bsite-jobs\.service\b", text, re.M) and re.search(r"^StartLimitIntervalSec=0$", text, re.M)


def test_the_units_run_what_make_run_runs(tmp_path):
    commands, _ = commands_and_env(make_settings(tmp_path), {"app": 8000, "datasette": 8001, "caddy": 8080},
                                   "/usr/bin/caddy")
    for unit, name in (("site-app.service", "app"), ("site-jobs.service", "jobs"), ("site-caddy.service", "caddy")):
        assert [Path(arg).name for arg in exec_start(unit)[1:]] == [Path(arg).name for arg in commands[name][1:]], unit


def test_the_caddyfile_defaults_are_what_the_units_and_site_toml_use(monkeypatch):
    """Production leaves the ports, the images folder and the access log to the Caddyfile's defaults
    (or sets them in the units): they must be where the app, Datasette and the jobs put them."""
    monkeypatch.delenv("SITE_PORT", raising=False)
    caddyfile = (ROOT / "Caddyfile").read_text()

    def default(variable: str) -> str:
        return re.search(r"\{\$" + variable + r":([^}]+)\}", caddyfile)[1]

    settings = load_settings(ROOT / "site.toml")
    datasette = options(exec_start("site-datasette.service")[3:])["--port"]
    assert default("SITE_PORT") == str(settings.port)
    assert default("DATASETTE_PORT") == datasette == str(DEFAULT_PORTS["datasette"])
    assert default("SITE_ADDRESS") == f":{DEFAULT_PORTS['caddy']}"
    images = settings.images_dir.relative_to(ROOT)
    assert default("SITE_IMAGES_DIR") == str(images)
    assert unit_environment("site-caddy.service")["SITE_IMAGES_DIR"] == str(Path("/srv/site") / images)
    assert default("SITE_ACCESS_LOG") == str(settings.access_log.relative_to(ROOT))


def unit_environment(unit: str) -> dict[str, str]:
    text = (ROOT / "deploy" / unit).read_text()
    return dict(line.split("=", 1) for line in re.findall(r"^Environment=(.*)$", text, re.M))


def test_the_app_unit_is_bounded_in_memory():
    text = (ROOT / "deploy" / "site-app.service").read_text()
    assert re.search(r"^MemoryHigh=\d+[MG]$", text, re.M) and re.search(r"^MemoryMax=\d+[MG]$", text, re.M)


def test_caddy_may_hand_rolled_logs_to_the_ledger_and_runs_hardened():
    """Caddy's log roller chowns each new file to the old one's group (site, which the ledger job
    runs as): only a member of that group may."""
    text = (ROOT / "deploy" / "site-caddy.service").read_text()
    assert re.search(r"^SupplementaryGroups=site$", text, re.M) and "install -o caddy -g site -m 0640" in text
    for line in ("NoNewPrivileges=true", "ProtectSystem=full", "PrivateTmp=true"):
        assert re.search(rf"^{line}$", text, re.M), line


def test_the_jobs_unit_is_bounded_in_memory():
    text = (ROOT / "deploy" / "site-jobs.service").read_text()
    assert re.search(r"^MemoryHigh=\d+[MG]$", text, re.M) and re.search(r"^MemoryMax=\d+[MG]$", text, re.M)


def test_only_the_jobs_unit_reads_the_secrets():
    """The Spotify secret and the calendar address unlock calls only the jobs make."""
    readers = [unit.name for unit in sorted((ROOT / "deploy").glob("*.service"))
               if "/etc/site-secrets.env" in unit.read_text()]
    assert readers == ["site-jobs.service"]
    shared = (ROOT / "deploy" / "site.env").read_text()
    secrets = (ROOT / "deploy" / "site-secrets.env").read_text()
    for name in ("SITE_SPOTIFY_CLIENT_ID", "SITE_SPOTIFY_CLIENT_SECRET", "SITE_CALENDAR_ICS_URL"):
        assert name not in shared and f"# {name}=" in secrets, name


def test_caddys_admin_api_is_a_private_socket_that_reload_uses():
    text = (ROOT / "deploy" / "site-caddy.service").read_text()
    admin = unit_environment("site-caddy.service")["CADDY_ADMIN"]
    runtime = re.search(r"^RuntimeDirectory=(.+)$", text, re.M)[1]
    assert admin == f"unix//run/{runtime}/admin.sock" and re.search(r"^RuntimeDirectoryMode=0700$", text, re.M)
    reload = re.search(r"^ExecReload=(.*)$", text, re.M)[1].split()
    assert reload[reload.index("--address") + 1] == admin
