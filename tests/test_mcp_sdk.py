"""The official MCP Python SDK client against the live server, in `legacy` mode (initialize
handshake) and in `auto` mode (server/discover, 2026-07-28): list the tools, call every one, and
check each structuredContent against its outputSchema. Plus the MCP Inspector CLI when npx is here."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import signal
import subprocess

import lens_web
import mcp
import pytest
from jsonschema import Draft202012Validator

from app import make_app
from servers import serve_wsgi
from siteapi.config import RatePolicy

INSPECTOR = "0.15.0"


@pytest.fixture(scope="module")
def mcp_site(site_settings):
    web, thread = lens_web.start()
    try:
        with serve_wsgi(make_app(site_settings, fetcher=lens_web.loopback_fetcher(web)).wsgi) as base:
            yield base, web
    finally:
        lens_web.stop(web, thread)


def sample_arguments(name: str, schema: dict, web, snapshot_id: int | None) -> dict:
    known = {"q": "carburetor", "query": "how did she fix the carburetors", "url": web.url("/rich"),
             "left": web.url("/rich"), "right": web.url("/rich"), "snapshot_id": snapshot_id}
    if name == "photo_query":
        return {"limit": 2}
    return {key: known.get(key, "test") for key in schema.get("required", [])}


async def exercise(base: str, web, mode: str) -> tuple[str, dict[str, dict]]:
    outcomes: dict[str, dict] = {}
    async with mcp.Client(base + "/mcp", mode=mode, read_timeout_seconds=30) as client:
        version = client.protocol_version
        tools = (await client.list_tools()).tools
        order = sorted(tools, key=lambda t: t.name != "representation_capture")  # capture first: it makes an id
        snapshot_id = None
        for tool in order:
            arguments = sample_arguments(tool.name, tool.input_schema, web, snapshot_id)
            result = await client.call_tool(tool.name, arguments)
            text = result.content[0].text if result.content else ""
            outcomes[tool.name] = {"error": result.is_error, "structured": result.structured_content, "text": text,
                                   "output_schema": tool.output_schema, "annotations": tool.annotations}
            if tool.name == "representation_capture" and not result.is_error:
                snapshot_id = result.structured_content["snapshots"][0]["id"]
    return version, outcomes


@pytest.mark.parametrize("mode, expected_version", [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
def test_the_sdk_client_lists_and_calls_every_tool(mcp_site, mode, expected_version):
    base, web = mcp_site
    version, outcomes = asyncio.run(exercise(base, web, mode))
    assert version == expected_version
    assert {"search_site", "resume", "representation_capture", "representation_read",
            "representation_compare"} <= set(outcomes)
    for name, outcome in outcomes.items():
        assert outcome["annotations"] is not None, name
        if outcome["error"]:
            assert outcome["text"] and outcome["structured"] is None, name  # the endpoint's sentence
            continue
        Draft202012Validator(outcome["output_schema"]).validate(outcome["structured"])
        assert json.loads(outcome["text"]) == outcome["structured"], name
    must_succeed = {"search_site", "ask", "resume", "photo_manifest", "photo_query", "lens_inspect", "lens_page",
                    "lens_compare", "census",
                    "representation_capture", "representation_read", "representation_compare"}
    failed = {n for n in must_succeed & set(outcomes) if outcomes[n]["error"]}
    assert not failed, {n: outcomes[n]["text"] for n in failed}
    inspected = outcomes["lens_inspect"]["structured"]  # a LensSummary of the full scan (REFERENCE)
    assert isinstance(inspected["readiness"], int) and isinstance(inspected["doors"], int) and "anatomy" not in inspected


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.parametrize("name", ["no_such_tool", "café", " resume"])
def test_the_sdk_reports_an_unknown_tool_as_an_error(mcp_site, mode, name):
    """In 2026-07-28 the SDK sends a name that is not plain ASCII in Mcp-Name as =?base64?...?=."""
    base, _ = mcp_site

    async def unknown():
        async with mcp.Client(base + "/mcp", mode=mode) as client:
            with pytest.raises(mcp.MCPError) as raised:
                await client.call_tool(name, {})
            return raised.value

    error = asyncio.run(unknown())
    assert error.error.code == -32602 and f"Unknown tool {name!r}" in error.error.message


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_sdk_can_send_a_whole_number_as_a_float(mcp_site, mode):
    base, _ = mcp_site

    async def search():
        async with mcp.Client(base + "/mcp", mode=mode) as client:
            return await client.call_tool("search_site", {"q": "carburetor", "limit": 2.0})

    result = asyncio.run(search())
    assert result.is_error is False and result.structured_content["returned"] == 2


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_sdk_can_send_a_number_as_a_string_as_the_description_allows(mcp_site, mode):
    """agent_audit23 #4: models quote numbers; the endpoint reads "5" as 5 and a non-number as its
    default (20), as over HTTP, and the inputSchema says a string is taken."""
    base, _ = mcp_site

    async def calls():
        async with mcp.Client(base + "/mcp", mode=mode) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            return listed, [await client.call_tool("search_site", {"q": "the", "limit": limit})
                            for limit in ("2", " 3 ", "five", "999")]

    listed, (two, three, five, many) = asyncio.run(calls())
    assert listed["search_site"].input_schema["properties"]["limit"]["type"] == ["integer", "string"]
    assert listed["ask"].input_schema["properties"]["top_k"]["type"] == ["integer", "string"]
    assert [r.is_error for r in (two, three, five, many)] == [False] * 4, two.content[0].text
    assert (two.structured_content["returned"], three.structured_content["returned"]) == (2, 3)
    assert five.structured_content["returned"] == min(20, five.structured_content["total"])
    assert many.structured_content["returned"] == min(50, many.structured_content["total"])


def test_a_capture_no_profile_could_fetch_is_an_error_as_lens_inspect_gives_it(mcp_site):
    """agent_audit23 #12: it answered ok with rows holding only the error."""
    base, web = mcp_site

    async def calls():
        async with mcp.Client(base + "/mcp", mode="legacy") as client:
            return [await client.call_tool(name, {"url": web.url("/reset")})
                    for name in ("representation_capture", "lens_inspect")]

    captured, inspected = asyncio.run(calls())
    assert captured.is_error is True and inspected.is_error is True and captured.structured_content is None
    assert captured.content[0].text == inspected.content[0].text and "reset" in captured.content[0].text
    assert json.loads(captured.content[1].text)["code"] == "upstream_failed"


def test_the_sdk_follows_a_trailing_slash_to_the_server(mcp_site):
    base, _ = mcp_site

    async def listed():
        async with mcp.Client(base + "/mcp/", mode="legacy") as client:
            return (await client.list_tools()).tools

    assert any(tool.name == "search_site" for tool in asyncio.run(listed()))


def test_the_sdk_shows_why_the_read_budget_refused_it(site_settings):
    """The 429 is a JSON-RPC error response: the SDK shows its message (a REST error body became
    only "Server returned an error response")."""
    settings = dataclasses.replace(site_settings, rates={**site_settings.rates, "read": RatePolicy("read", 4, 60)})

    async def until_refused():
        async with mcp.Client(base + "/mcp", mode="legacy") as client:
            with pytest.raises(mcp.MCPError) as raised:
                for _ in range(5):
                    await client.list_tools()
            return raised.value

    with serve_wsgi(make_app(settings).wsgi) as base:
        error = asyncio.run(until_refused())
    assert error.error.code == -32000 and "read budget is 4 per 60 seconds" in error.error.message
    assert error.error.data["code"] == "rate_limited" and error.error.data["retry_after"] >= 1


@pytest.mark.skipif(shutil.which("npx") is None, reason="npx is not installed")
def test_the_mcp_inspector_cli_lists_the_tools(mcp_site):
    base, _ = mcp_site
    # a version known to work, from the npm registry; in a session of its own, so that a timeout
    # stops node as well as npx
    inspector = subprocess.Popen(["npx", "-y", f"@modelcontextprotocol/inspector@{INSPECTOR}", "--cli", base + "/mcp",
                                  "--transport", "http", "--method", "tools/list"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = inspector.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(inspector.pid, signal.SIGKILL)
        inspector.communicate()
        pytest.skip("the MCP Inspector could not be fetched in time")
    done = subprocess.CompletedProcess(inspector.args, inspector.returncode, stdout, stderr)
    if done.returncode != 0 and ("ENOTFOUND" in done.stderr or "E404" in done.stderr or "EAI_AGAIN" in done.stderr
                                 or "network" in done.stderr.lower()):
        pytest.skip("the MCP Inspector package cannot be installed here")
    assert done.returncode == 0, done.stderr[-2000:]
    names = {tool["name"] for tool in json.loads(done.stdout)["tools"]}
    assert {"search_site", "resume"} <= names
