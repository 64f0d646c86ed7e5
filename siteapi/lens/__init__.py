"""The lens: fetch a public URL someone else chose and report how a machine sees it.

settings.py     the [lens] settings, read with their defaults and bounds
fetch.py        the safe fetcher, the only way the product fetches such a URL (address policy, deadline, caps)
page.py         the page pass: anatomy, structured data and AI signals of one page
cost.py         the page priced in tokens
observe.py      the page-only observation (`phases=page`) and the helpers the full scan shares
scan.py         the full scan that answers `/lens/fetch`, its summary and `/lens/compare.json`
discovery.py    well-known paths of the origin as probes, DNS-AID, ECH and the wire pass
terms.py        robots.txt scoreboard, content signals, TDMRep and the terms spectrum
agent.py        agent doors (MCP, NLWeb, WebMCP, A2A, OpenAPI, API catalog) and the strategy verdict
bots.py         the page as each crawler and two controls see it, and the wall model's read of each
readiness.py    agent-readiness checks, score, level and field score
cache.py        site.db caches of discovery results and CDN levels, and their hourly purge
cloudflare.py   mode=cloudflare: a CDN's agent-readiness level from its scanner
census.py       the weekly roster inspection and `/lens/census.json`
vault.py        representation snapshots (the MCP representation tools)
"""
