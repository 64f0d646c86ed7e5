"""Benchmark: CPU time of the lens page pass (no network) and its structured-data pass vs extruct.

Run from the project root:
    .venv/bin/python bench/bench_lens.py
For the extruct ratio, extruct lives in a separate environment, never in the project's:
    python3 -m venv /tmp/benchvenv && /tmp/benchvenv/bin/pip install 'extruct>=0.18,<0.19'
    .venv/bin/python bench/bench_lens.py --extruct /tmp/benchvenv/bin/python
The pages are generated real-world-shaped HTML (head metadata, JSON-LD with @graph, microdata,
RDFa, microformats, nav, articles, product cards, inline scripts and styles) of 2 MiB and 200 KiB.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from selectolax.lexbor import LexborHTMLParser  # noqa: E402

from siteapi.lens import cost, page  # noqa: E402
from siteapi.lens.settings import lens_settings  # noqa: E402

WORDS = ("agent crawler site page token model search archive photo lens market price review design "
         "system product article news update guide the a of and to in for with on by from").split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def make_page(size: int, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    head = ['<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Shop — Example</title>',
            '<meta name="description" content="Example shop">', '<meta name="robots" content="index,follow">',
            '<meta property="og:title" content="Shop"><meta property="og:type" content="website">',
            '<meta name="twitter:card" content="summary">', '<link rel="canonical" href="https://shop.example/">',
            '<link rel="alternate" type="application/rss+xml" href="/feed.xml">',
            '<script type="application/ld+json">' + json.dumps({"@context": "https://schema.org", "@graph": [
                {"@type": "WebSite", "name": "Shop"}, {"@type": "Organization", "name": "Shop Inc"}]}) + "</script>",
            "<style>" + ".c{color:red}" * 400 + "</style>",
            "<script>" + "window.__STATE__=" + json.dumps({"items": list(range(2000))}) + "</script></head><body>",
            '<nav><ul>' + "".join(f'<li><a href="/c/{i}">Category {i}</a></li>' for i in range(40)) + "</ul></nav>"]
    parts, length, i = head, sum(len(p) for p in head), 0
    while length < size - 200:
        i += 1
        kind = i % 4
        if kind == 0:
            block = (f'<div class="card" itemscope itemtype="https://schema.org/Product"><a href="/p/{i}">'
                     f'<img src="/i/{i}.jpg" alt="Product {i}" loading="lazy"></a><h3 itemprop="name">Product {i}</h3>'
                     f'<span itemprop="offers" itemscope itemtype="https://schema.org/Offer"><span itemprop="price">{i}.99</span></span>'
                     f'<p itemprop="description">{sentence(rng, 18)}</p></div>')
        elif kind == 1:
            block = (f'<article class="h-entry"><h2 class="p-name">{sentence(rng, 5)}</h2>'
                     + "".join(f"<p>{sentence(rng, 30)} <a href='/a/{i}/{j}'>more</a></p>" for j in range(3))
                     + '<div class="h-card p-author">Writer</div></article>')
        elif kind == 2:
            block = (f'<section vocab="https://schema.org/" typeof="Review"><span property="name">{sentence(rng, 4)}</span>'
                     f'<div property="reviewBody">{sentence(rng, 25)}</div><img src="/r/{i}.png"></section>')
        else:
            block = ('<script type="application/ld+json">' + json.dumps({"@context": "https://schema.org",
                     "@type": "BreadcrumbList", "itemListElement": [{"@type": "ListItem", "position": 1, "name": f"Item {i}"}]})
                     + "</script>")
        parts.append(block)
        length += len(block)
    parts.append("<footer><p>Footer</p></footer></body></html>")
    return "".join(parts).encode()[:size]


def cpu(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.process_time()
        fn()
        times.append(time.process_time() - started)
    return statistics.median(times) * 1000


def structured_pass(html: str) -> dict:
    tree = LexborHTMLParser(html)
    return page._structured(tree, "https://shop.example/", [])


EXTRUCT_SNIPPET = """
import sys, time, statistics, extruct
html = open(sys.argv[1], encoding="utf-8").read()
times = []
for _ in range(int(sys.argv[2])):
    t = time.process_time()
    out = extruct.extract(html, base_url="https://shop.example/", uniform=False,
                          syntaxes=["json-ld", "microdata", "rdfa", "opengraph", "microformat"])
    times.append(time.process_time() - t)
print(statistics.median(times) * 1000, sorted(k for k, v in out.items() if v))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extruct", help="python of an environment that has extruct installed")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    conf = lens_settings(None)
    cost.encoding()  # loading the vocabulary is a one-off per process, not part of a pass
    for label, size in (("2 MiB", 2 * 1024 * 1024), ("200 KiB", 200 * 1024)):
        body = make_page(size)
        analysed = page.analyse(body, "text/html; charset=utf-8", {}, "https://shop.example/")
        page_ms = cpu(lambda: page.analyse(body, "text/html; charset=utf-8", {}, "https://shop.example/"), args.repeat)
        cost_ms = cpu(lambda: cost.price(analysed, conf), args.repeat)
        html = body.decode()
        ours_ms = cpu(lambda: structured_pass(html), args.repeat)
        print(f"{label} page ({len(body)} bytes): page pass {page_ms:.1f} ms CPU (parse cap "
              f"{conf['parse_kb']} KiB, parseTruncated={analysed.parse_truncated}); token cost {cost_ms:.1f} ms; "
              f"page pass + cost {page_ms + cost_ms:.1f} ms")
        print(f"  structured-data pass over the whole page (no cap): ours {ours_ms:.1f} ms", end="")
        if args.extruct:
            with tempfile.NamedTemporaryFile("w", suffix=".html", encoding="utf-8", delete=False) as handle:
                handle.write(html)
            out = subprocess.run([args.extruct, "-c", EXTRUCT_SNIPPET, handle.name, str(max(1, args.repeat // 2))],
                                 capture_output=True, text=True, check=True).stdout.split(" ", 1)
            Path(handle.name).unlink()
            theirs = float(out[0])
            print(f"; extruct {theirs:.1f} ms ({theirs / ours_ms:.1f}x slower); extruct found {out[1].strip()}")
        else:
            print(" (extruct not measured: pass --extruct PYTHON)")


if __name__ == "__main__":
    main()
