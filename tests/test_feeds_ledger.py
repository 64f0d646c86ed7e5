"""The AI-crawler ledger: the crawler registry, incremental reading of Caddy's JSON access log
across its rolls, and the reader's 502/503 cases."""
from __future__ import annotations

import datetime as dt
import gzip
import json
import shutil
import sqlite3
import threading
import time

import pytest

from siteapi import db
from siteapi.feeds import FeedError
from siteapi.feeds.crawlers import CRAWLERS, counts_in_ledger, match_user_agent
from siteapi.feeds.ledger import _open, ledger, rolled_files, run_ledger
from siteapi.web import ApiError
from feeds_servers import USER_AGENTS as UA, feeds_settings

NOW = time.time()


def caddy_line(uri: str, ua: str, status: int = 200, ts: float = NOW, logger: str = "http.log.access.log0") -> str:
    """One access-log line exactly as Caddy 2.6 writes it (json encoder, `log` directive)."""
    return json.dumps({
        "level": "info", "ts": ts, "logger": logger, "msg": "handled request",
        "request": {"remote_ip": "203.0.113.9", "remote_port": "52814", "client_ip": "203.0.113.9", "proto": "HTTP/2.0",
                    "method": "GET", "host": "aadhar.sh", "uri": uri,
                    "headers": {"User-Agent": [ua], "Accept": ["*/*"], "Accept-Encoding": ["gzip, br"]},
                    "tls": {"resumed": False, "version": 772, "cipher_suite": 4865, "proto": "h2", "server_name": "aadhar.sh"}},
        "bytes_read": 0, "user_id": "", "duration": 0.001912, "size": 5120, "status": status,
        "resp_headers": {"Server": ["Caddy"], "Content-Type": ["text/html; charset=utf-8"]},
    }, separators=(",", ":")) + "\n"


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "var" / "access.log"
    path.parent.mkdir()
    path.write_text("")
    return path


def settings_for(tmp_path, log):
    return feeds_settings(tmp_path, access_log=str(log))


def hits(settings) -> dict[str, int]:
    return {item["bot"]: item["hits"] for item in ledger(db.connect(settings.db_path, readonly=True), settings)["line_items"]}


def append(path, *lines: str):
    with open(path, "a") as f:
        f.write("".join(lines))


def test_registry_match_order_and_exclusions():
    assert match_user_agent(UA["oai-searchbot"])["key"] == "oai-searchbot"
    assert match_user_agent(UA["chatgpt-user"])["key"] == "chatgpt-user"
    assert match_user_agent(UA["claude-user"])["key"] == "claude-user"
    assert match_user_agent(UA["perplexity-user"])["key"] == "perplexity-user"
    assert match_user_agent("mozilla/5.0 (compatible; GPTBOT/1.0)")["key"] == "gptbot"
    assert match_user_agent(UA["browser"]) is None and match_user_agent("") is None and match_user_agent(None) is None
    assert not counts_in_ledger(match_user_agent(UA["aadharshbot"]))
    keys = [c["key"] for c in CRAWLERS if c.get("ledger", True) and c["ua_substring"]]
    assert keys == ["oai-searchbot", "chatgpt-user", "gptbot", "claude-searchbot", "claude-user", "claudebot",
                    "perplexity-user", "perplexitybot", "ccbot", "bytespider", "amazonbot", "meta-externalagent",
                    "applebot", "googlebot", "bingbot", "duckduckbot"]
    assert {"Google-Extended", "Applebot-Extended", "Claude-User", "AadharshBot"} <= {c["token"] for c in CRAWLERS}
    assert all(c["role"] in ("search", "train", "answers") for c in CRAWLERS)


def test_counts_crawlers_and_skips_what_it_should(tmp_path, log):
    settings = settings_for(tmp_path, log)
    append(log,
           caddy_line("/writing/agents?ref=x", UA["gptbot"]), caddy_line("/writing/agents", UA["gptbot"]),
           caddy_line("/", UA["gptbot"], status=304), caddy_line("/missing", UA["googlebot"], status=404),
           caddy_line("/", UA["claudebot"]), caddy_line("/", UA["aadharshbot"]), caddy_line("/", UA["browser"]),
           caddy_line("/llms.txt", UA["chatgpt-user"]), caddy_line("/old", UA["claudebot"], ts=NOW - 40 * 86400),
           '{"level":"info","ts":1,"logger":"tls","msg":"certificate obtained"}\n',
           "{this is not json\n", '["a list"]\n', '{"logger":"http.log.access","status":"200"}\n',
           caddy_line("/data/BUY-PILLS-at-spam.example/", UA["gptbot"], status=302),
           caddy_line("/data", UA["claudebot"], status=308),
           caddy_line("/half", UA["gptbot"])[:50])
    summary = run_ledger(settings)
    assert "read 15 log lines" in summary and "3 malformed lines skipped" in summary
    assert hits(settings) == {"gptbot": 3, "claudebot": 1, "chatgpt-user": 1}  # 40-day-old hit outside the window
    body = ledger(db.connect(settings.db_path, readonly=True), settings)
    assert body["ok"] is True and body["window_days"] == 30 and body["rate_usd"] == 0.01
    assert body["total_hits"] == 5 and body["total_usd"] == 0.05 and "at $0.01 a page" in body["note"]
    dearer = feeds_settings(tmp_path, {"ledger_rate_usd": 0.05}, access_log=str(log))
    assert "at $0.05 a page" in ledger(db.connect(settings.db_path, readonly=True), dearer)["note"]  # "one cent" before
    gpt = body["line_items"][0]
    assert gpt["bot"] == "gptbot" and gpt["owner"] == "OpenAI" and gpt["kind"] and gpt["amountUsd"] == 0.03
    assert gpt["top_paths"][0] == {"path": "/writing/agents", "hits": 2}
    assert body["cost"]["available"] is False
    append(log, caddy_line("/half", UA["gptbot"])[50:], caddy_line("/next", UA["gptbot"]))
    run_ledger(settings)
    assert hits(settings)["gptbot"] == 5  # the half-written line counted once, when complete


def test_the_spellings_of_a_path_count_as_it_and_datasette_stays_out_however_spelled(tmp_path, log):
    """Each spelling of a page had a row of its own (countless rows, each read by every /ledger.json),
    and Datasette, which redirects any path, was left out only as /data/: arbitrary text reached the
    public ledger through /DATA/ and the like, which Caddy routes to it all the same."""
    settings = settings_for(tmp_path, log)
    append(log, *(caddy_line(uri, UA["gptbot"]) for uri in ("/about", "/%61bout", "//about", "/writing/../about",
                                                            "/about?ref=x", "http://aadhar.sh/about")),
           *(caddy_line(uri, UA["gptbot"], status=302) for uri in ("/DATA/BUY-PILLS/", "/Data/BUY/", "//data/BUY/",
                                                                   "/%64ata/BUY/", "http://aadhar.sh/data/BUY/")),
           caddy_line("/about", UA["gptbot"], ts=NOW + 3 * 86400))  # a clock that ran ahead
    assert ": 7 crawler hits," in run_ledger(settings)  # the five to Datasette are not counted
    body = ledger(db.connect(settings.db_path, readonly=True), settings)
    assert body["total_hits"] == 6 and body["line_items"][0]["top_paths"] == [{"path": "/about", "hits": 6}]


def roll(log, stamp: str, compress: bool = False):
    """What Caddy's roller does: rename to access-<time>.log (gzip it later), start a new file."""
    rolled = log.with_name(f"access-{stamp}.log")
    log.rename(rolled)
    if compress:
        with open(rolled, "rb") as src, gzip.open(str(rolled) + ".gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        rolled.unlink()
    log.write_text("")


def test_rolls_lose_and_double_count_nothing(tmp_path, log):
    settings = settings_for(tmp_path, log)
    append(log, *(caddy_line(f"/a{i}", UA["gptbot"]) for i in range(3)))
    run_ledger(settings)
    append(log, *(caddy_line(f"/b{i}", UA["gptbot"]) for i in range(2)))  # written before the roll, not yet read
    roll(log, "2026-11-20T01-00-00.000")
    append(log, caddy_line("/c", UA["gptbot"]))
    assert "from 2 file(s)" in run_ledger(settings)
    assert hits(settings)["gptbot"] == 6
    append(log, caddy_line("/d", UA["gptbot"]))
    roll(log, "2026-11-20T02-00-00.000", compress=True)  # rolled and already gzipped
    append(log, caddy_line("/e", UA["gptbot"]))
    roll(log, "2026-11-20T03-00-00.000")  # and rolled again before the job ran
    append(log, caddy_line("/f", UA["gptbot"]))
    assert "from 3 file(s)" in run_ledger(settings)
    assert hits(settings)["gptbot"] == 9
    assert "read 0 log lines" in run_ledger(settings)
    assert hits(settings)["gptbot"] == 9


def test_a_rolled_copy_compressed_after_it_was_listed_is_read_from_its_gz(tmp_path, log):
    """Caddy's roller can gzip a rolled copy and delete the plain one between the job listing the
    folder and opening the file; the job then reads the .gz, which holds the same lines."""
    append(log, *(caddy_line(f"/a{i}", UA["gptbot"]) for i in range(3)))
    roll(log, "2026-11-20T01-00-00.000")
    listed = rolled_files(log)
    plain = listed[0]
    assert plain.suffix == ".log"
    with open(plain, "rb") as source, gzip.open(plain.with_name(plain.name + ".gz"), "wb") as target:
        shutil.copyfileobj(source, target)
    expected = plain.read_bytes()
    plain.unlink()
    with _open(listed[0]) as f:
        assert f.read() == expected
    with pytest.raises(FileNotFoundError):
        _open(tmp_path / "never-rolled.log")


@pytest.mark.parametrize("first_read", ["", caddy_line("/p", UA["gptbot"])[:50]], ids=["empty", "half-a-line"])
def test_a_roll_after_a_read_of_nothing_loses_nothing(tmp_path, log, first_read):
    settings = settings_for(tmp_path, log)
    append(log, first_read)  # a fresh log, or Caddy half-way through its first line
    assert "read 0 log lines" in run_ledger(settings)
    append(log, caddy_line("/p", UA["gptbot"])[len(first_read):] if first_read else "",
           *(caddy_line(f"/a{i}", UA["gptbot"]) for i in range(4)))
    roll(log, "2026-11-20T01-00-00.000")
    append(log, caddy_line("/b", UA["gptbot"]))
    assert "from 2 file(s)" in run_ledger(settings)
    assert hits(settings)["gptbot"] == 6 - (not first_read)


def test_overlapping_runs_count_each_line_once(tmp_path, log, write_lock_asks):
    settings = settings_for(tmp_path, log)
    run_ledger(settings)
    append(log, *(caddy_line(f"/x{i}", UA["claudebot"]) for i in range(10)))
    outcomes = []

    def run():
        try:
            outcomes.append(run_ledger(settings))
        except FeedError as exc:
            outcomes.append(exc)

    holder = db.connect(settings.db_path)
    holder.execute("BEGIN IMMEDIATE")  # both runs read the log, then wait here for the write lock
    runs = [threading.Thread(target=run) for _ in range(2)]
    for thread in runs:
        thread.start()
    write_lock_asks.wait_for(2)  # both have read the log and wait for the lock the holder has
    holder.execute("ROLLBACK")
    for thread in runs:
        thread.join()
    assert hits(settings)["claudebot"] == 10
    assert sum(isinstance(o, FeedError) and "changed nothing" in str(o) for o in outcomes) <= 1


def test_gzip_in_progress_prefers_the_complete_plain_copy(tmp_path, log):
    settings = settings_for(tmp_path, log)
    append(log, caddy_line("/a", UA["claudebot"]))
    run_ledger(settings)
    append(log, caddy_line("/b", UA["claudebot"]))
    roll(log, "2026-11-20T01-00-00.000")
    (log.parent / "access-2026-11-20T01-00-00.000.log.gz").write_bytes(gzip.compress(b"partial")[:10])
    run_ledger(settings)
    assert hits(settings)["claudebot"] == 2


def test_rolled_file_deleted_is_reported(tmp_path, log):
    settings = settings_for(tmp_path, log)
    append(log, caddy_line("/a", UA["gptbot"]))
    run_ledger(settings)
    roll(log, "2026-11-20T01-00-00.000")
    (log.parent / "access-2026-11-20T01-00-00.000.log").unlink()
    append(log, caddy_line("/b", UA["gptbot"]))
    assert "may be missing" in run_ledger(settings)
    assert hits(settings)["gptbot"] == 2


def rolled_stamp(seconds_from_now: float) -> str:
    """A roll time as Caddy names a rolled file (UTC, to the millisecond)."""
    when = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=seconds_from_now)
    return when.strftime("%Y-%m-%dT%H-%M-%S.000")


def test_the_rolled_files_left_when_the_one_last_read_is_gone_are_read(tmp_path, log):
    """A flood rolls the log several times between two runs and the file last read is deleted: the
    rolled files still there rolled after that run and are read whole, not skipped (load_audit23 #5)."""
    settings = settings_for(tmp_path, log)
    append(log, caddy_line("/a", UA["gptbot"]))
    run_ledger(settings)
    append(log, caddy_line("/b", UA["gptbot"]))
    first = rolled_stamp(2)
    roll(log, first)
    append(log, caddy_line("/c", UA["gptbot"]), caddy_line("/d", UA["claudebot"]))
    roll(log, rolled_stamp(3), compress=True)
    append(log, caddy_line("/e", UA["claudebot"]))
    roll(log, rolled_stamp(4))
    (log.parent / f"access-{first}.log").unlink()  # the one last read, with /b
    append(log, caddy_line("/f", UA["gptbot"]))
    assert "may be missing" in run_ledger(settings)
    assert hits(settings) == {"gptbot": 3, "claudebot": 2}  # /a, /c, /f; /d, /e
    append(log, caddy_line("/g", UA["gptbot"]))
    assert "read 1 log lines" in run_ledger(settings)  # and read once only
    assert hits(settings) == {"gptbot": 4, "claudebot": 2}


def test_a_log_whose_inode_names_another_file_now_is_not_taken_for_the_one_last_read(tmp_path, log):
    """A run that read an empty log remembers it by its inode, which a later log can have too (a
    freed inode reused, or a roll that copies the lines away and empties the file in place): with a
    rolled file newer than that run, the log is not the file it read, and the rolled lines count
    (review23b #7: 8 of 9 hits lost, with no word of it)."""
    settings = settings_for(tmp_path, log)
    run_ledger(settings)  # an empty log: remembered by its inode
    append(log, *(caddy_line(f"/a{i}", UA["gptbot"]) for i in range(5)))
    for stamp, lines in ((rolled_stamp(2), 5), (rolled_stamp(3), 3)):
        with open(log, "rb") as src, gzip.open(log.with_name(f"access-{stamp}.log.gz"), "wb") as dst:
            shutil.copyfileobj(src, dst)
        log.write_text("")  # the same inode, empty again
        if lines == 5:
            append(log, *(caddy_line(f"/b{i}", UA["gptbot"]) for i in range(3)))
    append(log, caddy_line("/c", UA["gptbot"]))
    run_ledger(settings)
    assert hits(settings) == {"gptbot": 9}
    append(log, caddy_line("/d", UA["gptbot"]))
    assert "read 1 log lines" in run_ledger(settings)
    assert hits(settings) == {"gptbot": 10}


@pytest.mark.parametrize("by_hand", ["replaced", "emptied"])
def test_a_log_replaced_or_emptied_by_hand_counts_no_rolled_file_again(tmp_path, log, by_hand):
    """The live log deleted and started again, or emptied in place (`: > access.log` to free disk),
    is not Caddy's roll: the rolled files were counted by earlier runs and stay counted once
    (review23 #2: /ledger.json counted them twice)."""
    settings = settings_for(tmp_path, log)
    append(log, caddy_line("/a", UA["gptbot"]))
    run_ledger(settings)
    roll(log, rolled_stamp(-1))  # before the next run: its lines were read by the first
    append(log, caddy_line("/b", UA["gptbot"]))
    run_ledger(settings)
    assert hits(settings) == {"gptbot": 2}
    if by_hand == "replaced":
        log.unlink()
    log.write_text("")
    append(log, caddy_line("/c", UA["gptbot"]))
    assert "may be missing" in run_ledger(settings)
    assert hits(settings) == {"gptbot": 3}


def test_unreadable_log_keeps_counts_and_position(tmp_path, log):
    settings = settings_for(tmp_path, log)
    append(log, caddy_line("/a", UA["gptbot"]))
    run_ledger(settings)
    conn = db.connect(settings.db_path, readonly=True)
    before = tuple(conn.execute("SELECT * FROM ledger_state").fetchone())
    log.unlink()
    with pytest.raises(FeedError, match="does not exist"):
        run_ledger(settings)
    log.mkdir()  # something that is not a readable file
    with pytest.raises(FeedError, match="could not be read"):
        run_ledger(settings)
    assert tuple(conn.execute("SELECT * FROM ledger_state").fetchone()) == before
    assert hits(settings) == {"gptbot": 1}


def test_reader_errors_carry_the_ledger_body(tmp_path, log):
    unconfigured = feeds_settings(tmp_path)
    assert "no access log" in run_ledger(unconfigured)
    with pytest.raises(ApiError) as caught:
        ledger(sqlite3.connect(":memory:"), unconfigured)
    err = caught.value
    assert (err.status, err.body["code"]) == (503, "not_configured")
    assert err.body["line_items"] == [] and err.body["window_days"] == 30  # `ok: false` is the route's (test_feeds_http)

    settings = settings_for(tmp_path, log)
    db.writer(settings.db_path).close()
    with pytest.raises(ApiError) as caught:  # never read
        ledger(db.connect(settings.db_path, readonly=True), settings)
    assert (caught.value.status, caught.value.body["code"]) == (502, "upstream_failed")
    assert caught.value.body["total_hits"] == 0
    run_ledger(settings)
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=2)
    with pytest.raises(ApiError) as caught:  # not read for two hours
        ledger(db.connect(settings.db_path, readonly=True), settings, now=later)
    assert caught.value.status == 502 and caught.value.body["read_at"]
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"not a database" * 300)
    with pytest.raises(ApiError) as caught:
        ledger(sqlite3.connect(broken), settings)
    assert caught.value.status == 502 and caught.value.body["line_items"] == []


@pytest.mark.parametrize("damage", ["cut short", "corrupted"])
def test_a_damaged_rolled_gz_is_read_as_far_as_it_goes_then_the_job_moves_on(tmp_path, log, damage):
    """A rolled .gz whose plain copy is gone stays damaged: it must not fail every run from then on."""
    settings = settings_for(tmp_path, log)
    append(log, caddy_line("/a", UA["gptbot"]))
    run_ledger(settings)
    append(log, *(caddy_line(f"/b{i}/{'x' * (i % 97)}", UA["gptbot"]) for i in range(3000)))
    stamp = rolled_stamp(2)
    roll(log, stamp, compress=True)
    rolled = log.parent / f"access-{stamp}.log.gz"
    data = rolled.read_bytes()
    middle = len(data) // 2
    rolled.write_bytes(data[:middle] if damage == "cut short" else data[:middle] + bytes(256) + data[middle + 256:])
    append(log, caddy_line("/c", UA["claudebot"]))
    assert "may be missing" in run_ledger(settings)
    counted = hits(settings)
    assert counted["claudebot"] == 1 and 1 < counted["gptbot"] < 3001  # the readable part of the rolled file
    append(log, caddy_line("/d", UA["claudebot"]))
    assert "read 1 log lines" in run_ledger(settings)
    assert hits(settings) == {**counted, "claudebot": 2}


def test_a_line_nested_past_the_stack_is_malformed_not_fatal(tmp_path, log):
    settings = settings_for(tmp_path, log)
    append(log, "[" * 100_000 + "\n", caddy_line("/a", UA["gptbot"]))
    assert "1 malformed lines skipped" in run_ledger(settings)
    assert hits(settings) == {"gptbot": 1}
