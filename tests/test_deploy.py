"""The systemd units in deploy/ start Datasette as `make run` does (siteapi/stack.py), so what the
tests prove of the one holds for the other."""
import re
import shlex
from pathlib import Path

from conftest import ROOT
from siteapi.stack import datasette_command


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
