"""Benchmark /ask: ranking quality on bench/ask_eval.json (model vs lexical) and server-side speed
and memory with 2,000 synthetic pages indexed.

    .venv/bin/python bench/bench_ask.py            # everything, Markdown figures on stdout
    .venv/bin/python bench/bench_ask.py --quality  # quality only

Quality runs the real `ask.handle` path on a scratch copy of site.db built from content/: the
model path, and the lexical path (the same function with the model budget spent). Speed pins the
process to one core and times `ask.handle` per question (JSON answer, model path); memory is the
peak RSS of a fresh process that loads the model and answers questions against the 2,000 pages.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from siteapi import ask, db, ranker, search  # noqa: E402
from siteapi.config import load_settings  # noqa: E402
from siteapi.content import run_content  # noqa: E402

EVAL = ROOT / "bench" / "ask_eval.json"
SYNTHETIC_PAGES = 2000


def scratch_site(folder: Path, content_dir: Path = ROOT / "content"):
    """Settings for a scratch site.db in `folder` indexed from `content_dir`, with page vectors."""
    source = (ROOT / "site.toml").read_text(encoding="utf-8")
    source = re.sub(r'(?m)^content_dir = .*$', f'content_dir = "{content_dir}"', source)
    source = re.sub(r'(?m)^db_path = .*$', f'db_path = "{folder / "site.db"}"', source)
    (folder / "site.toml").write_text(source, encoding="utf-8")
    settings = load_settings(folder / "site.toml")
    run_content(settings)  # indexes the pages and computes their vectors
    return settings, db.writer(settings.db_path)


def load_eval() -> dict:
    data = json.loads(EVAL.read_text(encoding="utf-8"))
    return {"questions": data["questions"], "unanswerable": data["unanswerable"]}


def target_path(target: str, settings) -> str:
    return target[len(settings.public_base_url):] if target.startswith(settings.public_base_url) else target


def content_words(text: str) -> set[str]:
    return {w for w in re.split(r"[^\w]+|_", text.lower()) if len(w) > 1 and w not in search.STOPWORDS}


def shares_no_word(question: str, page_words: set[str]) -> bool:
    """True when no content word of the question, nor its stem, starts any word of the page (strict:
    'carburetors' shares with 'carburetor', 'tuning' with 'tune')."""
    for word in content_words(question):
        stem = word[: max(4, len(word) - 3)] if len(word) > 5 else word
        if any(w.startswith(stem) for w in page_words):
            return False
    return True


def answer(settings, conn, question: str, allowed) -> dict:
    return ask.handle("GET", {"query": question, "streaming": "0", "top_k": "10"}, None, None, settings, conn, allowed)[2]


def quality(settings, conn) -> dict:
    data = load_eval()
    pages = {r["path"]: content_words(f"{r['title']} {r['description']} {r['text']}")
             for r in conn.execute("SELECT path, title, description, text FROM pages")}
    out = {"questions": len(data["questions"]), "unanswerable": len(data["unanswerable"])}
    no_word = [shares_no_word(q["q"], pages[target_path(q["target"], settings)]) for q in data["questions"]]
    out["no_shared_word"] = sum(no_word)
    for name, allowed in (("model", lambda: True), ("lexical", lambda: False)):
        reciprocal, top1, top1_noword = [], [], []
        for item, disjoint in zip(data["questions"], no_word):
            body = answer(settings, conn, item["q"], allowed)
            assert body["_meta"]["ranking"].startswith("model" if name == "model" else "lexical"), body["_meta"]
            urls = [r["url"] for r in body["results"]]
            wanted = settings.url(target_path(item["target"], settings))
            rank = urls.index(wanted) + 1 if wanted in urls else None
            reciprocal.append(1 / rank if rank else 0.0)
            top1.append(rank == 1)
            if disjoint:
                top1_noword.append(rank == 1)
        out[name] = {"top1": sum(top1) / len(top1), "mrr10": sum(reciprocal) / len(reciprocal),
                     "top1_no_shared_word": sum(top1_noword) / max(1, len(top1_noword))}
    tops = []
    for question in data["unanswerable"]:
        results = answer(settings, conn, question, lambda: True)["results"]
        tops.append(results[0]["score"] / 100 if results else 0.0)
    out["unanswerable_mean_top_probability"] = statistics.mean(tops)
    answered = [answer(settings, conn, q["q"], lambda: True)["results"][0]["score"] / 100 for q in data["questions"]]
    out["answerable_mean_top_probability"] = statistics.mean(answered)
    return out


def add_synthetic_pages(settings, conn, count: int) -> None:
    """`count` extra pages built from the site's own vocabulary, with their vectors."""
    words = sorted({w for (text,) in conn.execute("SELECT text FROM pages") for w in re.findall(r"[a-z]{3,}", text.lower())})
    rng = random.Random(7)
    rows = []
    for n in range(count):
        title = " ".join(rng.choices(words, k=5)).capitalize()
        description = " ".join(rng.choices(words, k=18)).capitalize() + "."
        text = ". ".join(" ".join(rng.choices(words, k=12)).capitalize() for _ in range(10)) + "."
        rows.append({"path": f"/synthetic/{n}", "title": title, "description": description, "kind": "writing",
                     "date": None, "body": text, "text": text, "hash": f"synthetic-{n}", "source": f"synthetic/{n}.md",
                     "tags": "[]"})
    with db.transaction(conn):
        conn.executemany(
            "INSERT INTO pages(path, title, description, kind, date, body, text, hash, source, tags)"
            " VALUES (:path, :title, :description, :kind, :date, :body, :text, :hash, :source, :tags)", rows)
    ranker.refresh_page_vectors(conn, settings)


def speed(settings, conn) -> dict:
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    questions = [q["q"] for q in load_eval()["questions"]]
    answer(settings, conn, questions[0], lambda: True)  # load the model and the page matrix
    timings = {}
    for name, allowed in (("model", lambda: True), ("lexical", lambda: False)):
        runs = []
        for _ in range(3):
            for question in questions:
                started = time.perf_counter()
                body = answer(settings, conn, question, allowed)
                runs.append((time.perf_counter() - started) * 1000)
                assert body["_meta"]["ranking"].startswith(name)
        timings[name] = {"median_ms": statistics.median(runs), "p95_ms": sorted(runs)[int(len(runs) * 0.95)]}
    return {"pages": conn.execute("SELECT count(*) FROM pages").fetchone()[0], **timings}


RSS_PROBE = """
import json, sys
sys.path.insert(0, {root!r})
from siteapi import ask, db
from siteapi.config import load_settings
settings = load_settings({toml!r})
conn = db.connect(settings.db_path, readonly=True)
for question in json.load(open({eval!r}))["questions"]:
    ask.handle("GET", {{"query": question["q"], "streaming": "0"}}, None, None, settings, conn, lambda: True)
status = open("/proc/self/status").read()
print(json.dumps({{k: int(status.split(k + ":")[1].split()[0]) // 1024 for k in ("VmRSS", "VmHWM")}}))
"""


def memory(settings) -> dict:
    code = RSS_PROBE.format(root=str(ROOT), toml=str(settings.db_path.parent / "site.toml"), eval=str(EVAL))
    return json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quality", action="store_true", help="quality only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        settings, conn = scratch_site(Path(folder))
        q = quality(settings, conn)
        print(f"## /ask quality ({q['questions']} questions, {q['no_shared_word']} sharing no content word "
              f"with their target; {q['unanswerable']} unanswerable)\n")
        print("| ranker | top-1 | MRR@10 | top-1 on no-shared-word questions |\n|---|---|---|---|")
        for name in ("model", "lexical"):
            print(f"| {name} | {q[name]['top1']:.2f} | {q[name]['mrr10']:.2f} | {q[name]['top1_no_shared_word']:.2f} |")
        print(f"\nMean top probability: unanswerable {q['unanswerable_mean_top_probability']:.3f} (target < 0.2), "
              f"answerable {q['answerable_mean_top_probability']:.3f}. Targets for the model: top-1 >= 0.70, MRR@10 >= 0.80.")
        print("\nReproduce: `.venv/bin/python bench/bench_ask.py` (T and none_cosine: `bench/fit_ranker.py`).")
        if args.quality:
            return
        print(f"\nIndexing {SYNTHETIC_PAGES} synthetic pages...", file=sys.stderr)
        add_synthetic_pages(settings, conn, SYNTHETIC_PAGES)
        s = speed(settings, conn)
        m = memory(settings)
        print(f"\n## /ask speed ({s['pages']} pages, one core, server time per question)\n")
        print("| ranker | median ms | p95 ms |\n|---|---|---|")
        for name in ("model", "lexical"):
            print(f"| {name} | {s[name]['median_ms']:.2f} | {s[name]['p95_ms']:.2f} |")
        print("\nTarget: model median <= 10 ms. Lexical repeats hit /search.json's per-thread query cache.")
        print(f"\nMemory of a process with the model loaded, after answering every question: "
              f"RSS {m['VmRSS']} MB, peak {m['VmHWM']} MB (target <= 350 MB).")


if __name__ == "__main__":
    main()
