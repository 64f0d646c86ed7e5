"""What showing block breaks in snippets (content.shown: " · " where a heading ends) costs an
uncached search, side by side in one process with the snippets made from the text as it is.

    .venv/bin/python bench/bench_snippets.py

`search.rank` (the uncached /search.json path: the FTS query, then a snippet of every result) on
the demo site.db, 8 queries of up to 50 results each, 50 times a round, 7 rounds alternating.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ask import scratch_site  # noqa: E402

from siteapi import search  # noqa: E402

QUERIES = [["carburetor"], ["coffee"], ["robots"], ["camera"], ["photo", "recipe"], ["api", "limits"], ["valve"],
           ["grain"]]
ROUNDS, REPEATS = 7, 50


def per_query_us(conn, settings) -> float:
    started = time.perf_counter()
    for _ in range(REPEATS):
        for words in QUERIES:
            search.rank(conn, words, 50, settings)
    return (time.perf_counter() - started) / (REPEATS * len(QUERIES)) * 1e6


def main() -> None:
    shown = search.shown
    variants = {"snippets with block breaks shown (shipped)": shown, "snippets of the text as it is": lambda text: text}
    times: dict[str, list[float]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as folder:
        settings, conn = scratch_site(Path(folder))
        for _ in range(ROUNDS):
            for name, variant in variants.items():
                search.shown = variant
                times[name].append(per_query_us(conn, settings))
        search.shown = shown
    base = statistics.median(times["snippets of the text as it is"])
    print("## Snippets: the cost of showing block breaks (uncached search)\n")
    print("| snippets | µs per query, median of 7 rounds | ratio |\n|---|---|---|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.0f} | {statistics.median(values) / base:.2f} |")
    print("\nReproduce: `.venv/bin/python bench/bench_snippets.py` (about a minute).")


if __name__ == "__main__":
    main()
