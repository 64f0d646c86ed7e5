"""The site inspected by its own lens reaches the top readiness level (5, Agent-Native), with the
agent documents it publishes checked the way scanners check them."""
from urllib.parse import urlsplit

from app import make_app
from servers import serve_wsgi
from siteapi.lens import scan
from siteapi.lens.fetch import AddressPolicy, Fetcher


def test_own_site_reaches_level_5(site_settings):
    with serve_wsgi(make_app(site_settings).wsgi) as base:
        port = urlsplit(base).port
        fetcher = Fetcher(policy=AddressPolicy(allow=frozenset({("127.0.0.1", port)})),
                          resolve=lambda host, timeout: ["127.0.0.1"] if host == "aadhar.sh" else [])
        obs = scan.scan(f"http://aadhar.sh:{port}/", site_settings, fetcher=fetcher)
    readiness = obs["readiness"]
    assert readiness["level"] == 5 and readiness["levelName"] == "Agent-Native", readiness["levelNote"]
    checks = readiness["checks"]
    for key in ("robotsTxt", "sitemap", "linkHeaders", "markdownNegotiation", "robotsTxtAiRules", "contentSignals",
                "apiCatalog", "mcpServerCard", "agentSkills", "webMcp", "webBotAuth"):
        assert checks[key]["status"] == "pass", (key, checks[key].get("detail"))
    assert checks["oauthDiscovery"]["status"] == "neutral" and checks["oauthDiscovery"].get("notApplicable")
    assert readiness["keyless"]
    assert obs["agent"]["strategy"]["verdict"] == "agent-native"
    assert {"mcp", "nlweb", "webmcp", "agentCard"} <= set(obs["agent"]["strategy"]["action"])
    assert readiness["field"]["overall"] == 100
