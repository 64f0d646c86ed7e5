"""Benchmark /ask: ranking quality on bench/ask_eval.json (model vs lexical) and server-side speed
and memory with 2,000 synthetic pages indexed.

    .venv/bin/python bench/bench_ask.py            # everything, Markdown figures on stdout
    .venv/bin/python bench/bench_ask.py --quality  # quality only
    .venv/bin/python bench/bench_ask.py --variants # page-representation variants, 2-fold held out

Everything is quality, the variants, then speed and memory.

Quality runs the real `ask.handle` path on a scratch copy of site.db built from content/: the
model path, and the lexical path (the same function with the model budget spent). Speed pins the
process to one core and times `ask.handle` per question (JSON answer, model path); memory is the
peak RSS of a fresh process that loads the model and answers questions against the 2,000 pages.

Held-out figures: the questions are split in two halves by their target page (sha256 of the target
path, even/odd), so no page is asked about in both. `--variants` scores alternative page
representations on both halves, picks the best variant (top-1 + MRR@10) on each half and reports it
on the other, next to the shipped ranker there: a variant is only worth shipping if it wins there.

Development set: bench/ask_dev.json, when present, holds questions written without sight of the
evaluation set, the variants or the ranker. `--variants` then scores every variant on it too and
names the one to ship by a rule fixed before any variant was scored on it: the highest top-1 +
MRR@10 on the development set (the shipped one on a tie). The evaluation set measures that choice
without making it.

Test set: bench/ask_test.json, when present, was written after the ranker of 69f0967 was fixed, by a
helper that read only content/ (never the evaluation or development set, the ranker, the variants
or a figure), and is scored once. It exists because the evaluation set took part in choosing among
the representations before the development set did, which biases its figure upward. The rule, fixed
before the test set was scored: the issue's quality targets are judged on the evaluation and test
sets pooled (their answerable questions together, and their unanswerable ones together); each set's
own figures are printed beside. A later change to the ranker is not judged on either set again.

Second test set: bench/ask_test2.json, written in session 22 (2026-11-22) under the same blindness (a
helper that read only content/ and a checker that ranks nothing; 80 answerable questions, 10 near
misses and 5 off-topic ones the site cannot answer), before any candidate was scored on it. The rule,
committed before the set was written: it is scored once, at one commit, with the shipped ranker and
with each candidate fixed in a commit before that scoring; a candidate replaces the shipped ranker
only if on this set it is ahead in both top-1 and MRR@10 and its unanswerable mean top probability is
no higher. The issue's targets are judged on this set alone from then on (every other labelled
question has served in development by then); the earlier sets' figures are printed beside.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from siteapi import ask, db, ranker, search  # noqa: E402
from siteapi.config import load_settings  # noqa: E402
from siteapi.content import run_content  # noqa: E402

EVAL = ROOT / "bench" / "ask_eval.json"
DEV = ROOT / "bench" / "ask_dev.json"
TEST = ROOT / "bench" / "ask_test.json"
TEST2 = ROOT / "bench" / "ask_test2.json"
SHIPPED = "shipped: split head + overlap, blend 0.3"
CENTROID = "centroid of 'title. description' + passages (shipped until 2026-11-22)"
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


def load_eval(path: Path = EVAL) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    return {"questions": data["questions"], "unanswerable": data["unanswerable"]}


def judged_sets() -> list[tuple[str, dict]]:
    """The question sets quality reports, the one that judges the targets last: the evaluation set;
    with the test set present, the test set and both pooled; with the second test set present, it
    (see the docstring's rules)."""
    evaluation = ("evaluation", load_eval())
    if not TEST.exists():
        return [evaluation]
    test = load_eval(TEST)
    pooled = {key: evaluation[1][key] + test[key] for key in ("questions", "unanswerable")}
    second = [("second test", load_eval(TEST2))] if TEST2.exists() else []
    return [evaluation, ("test", test), ("evaluation + test", pooled), *second]


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
    return ask.handle("GET", {"query": question, "streaming": "0", "top_k": "10"}, None, None, settings, conn, allowed).body


def fold(target: str) -> str:
    """The half ("A" or "B") a question belongs to, by its target page."""
    return "AB"[int(hashlib.sha256(target.encode()).hexdigest(), 16) % 2]


def quality(settings, conn, data: dict) -> dict:
    pages = {r["path"]: content_words(f"{r['title']} {r['description']} {r['text']}")
             for r in conn.execute("SELECT path, title, description, text FROM pages")}
    out = {"questions": len(data["questions"]), "unanswerable": len(data["unanswerable"])}
    no_word = [shares_no_word(q["q"], pages[target_path(q["target"], settings)]) for q in data["questions"]]
    out["no_shared_word"] = sum(no_word)
    for name, allowed in (("model", lambda: True), ("lexical", lambda: False)):
        reciprocal, top1, top1_noword, halves = [], [], [], []
        for item, disjoint in zip(data["questions"], no_word):
            body = answer(settings, conn, item["q"], allowed)
            assert body["_meta"]["ranking"].startswith("model" if name == "model" else "lexical"), body["_meta"]
            urls = [r["url"] for r in body["results"]]
            wanted = settings.url(target_path(item["target"], settings))
            rank = urls.index(wanted) + 1 if wanted in urls else None
            reciprocal.append(1 / rank if rank else 0.0)
            top1.append(rank == 1)
            halves.append(fold(item["target"]))
            if disjoint:
                top1_noword.append(rank == 1)
        out[name] = {"top1": sum(top1) / len(top1), "mrr10": sum(reciprocal) / len(reciprocal),
                     "top1_no_shared_word": sum(top1_noword) / max(1, len(top1_noword))}
        for half in "AB":
            picked = [i for i, h in enumerate(halves) if h == half]
            out[name][half] = (sum(top1[i] for i in picked) / len(picked), sum(reciprocal[i] for i in picked) / len(picked))
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


def joined_head_passages(title: str, description: str, text: str) -> list[str]:
    """The passages of the representation shipped until 2026-11-22: "title. description" as one,
    then the start of the body in sentence-aligned passages without overlap."""
    out, current = [f"{title}. {description}"], ""
    for sentence in ranker._SENTENCE_END.split(text):
        if current and len(current) + len(sentence) > ranker.CHUNK_CHARS:
            out.append(current)
            if len(out) > ranker.PAGE_CHUNKS:
                return out
            current = ""
        current = f"{current} {sentence}".strip()
    return out + ([current] if current else [])


def sif_embed(model, text: str, frequency: dict, total: int, a: float) -> np.ndarray:
    """The text's vector with each token weighted a / (a + p(token)) by its frequency in the site's
    pages (SIF, Arora et al. 2017) instead of the plain mean; [CLS] and [SEP] weigh nothing."""
    encoding = model.tokenizer.encode(text)
    ids = np.array([encoding.ids], dtype=np.int64)
    tokens = model.session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                      "token_type_ids": np.zeros_like(ids)})[0][0]
    weights = np.array([0.0 if special else a / (a + frequency.get(i, 0) / total)
                        for i, special in zip(encoding.ids, encoding.special_tokens_mask)])
    vector = (tokens * weights[:, None]).sum(axis=0)
    return vector / np.linalg.norm(vector)


def corpus_corrections(questions: np.ndarray, units: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Scores after unsupervised corrections fitted on the site's own passage vectors (no question
    is used): centring and removing the top principal component ("all-but-the-top", Mu et al. 2018),
    whitening by the passages' covariance, and hubness correction (CSLS, Conneau et al. 2018: each
    page's cosine less a share of its mean cosine to the 10 nearest passages of other pages)."""
    def unit(x):
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    def pages_under(transform):
        return unit(np.stack([unit(transform(u)).mean(axis=0) for u in units]))

    passages = np.concatenate(units)
    mean = passages.mean(axis=0)
    top = np.linalg.svd(passages - mean, full_matrices=False)[2][:1]
    eigenvalues, eigenvectors = np.linalg.eigh(np.cov(passages.T))
    whitening = eigenvectors @ np.diag((eigenvalues + 0.3 * eigenvalues.mean()) ** -0.25) @ eigenvectors.T
    out = {}
    for name, transform in (("centred on the mean passage", lambda x: x - mean),
                            ("centred, top principal component removed", lambda x: (x - mean) - (x - mean) @ top.T @ top),
                            ("whitened (passage covariance, lambda 0.3, power 1/4)", lambda x: x @ whitening)):
        out[name] = unit(transform(questions)) @ pages_under(transform).T
    pages = pages_under(lambda x: x)
    owner = np.concatenate([[i] * len(u) for i, u in enumerate(units)])
    to_pages = passages @ pages.T
    crowding = np.array([np.sort(to_pages[owner != i, i])[-10:].mean() for i in range(len(units))])
    out["hubness-corrected (CSLS, k 10, beta 0.25)"] = questions @ pages.T - 0.25 * crowding
    return out


def trained_prototypes(units: list[np.ndarray], start: np.ndarray, l2: float = 0.1, temperature: float = 0.05,
                       steps: int = 300) -> np.ndarray:
    """One vector per page fitted, by softmax regression, to tell the site's own passages apart by
    page (no question is used), pulled towards `start` with weight `l2`: a supervised use of the
    corpus, where the other corrections are unsupervised."""
    x = np.concatenate(units)
    owner = np.concatenate([[i] * len(u) for i, u in enumerate(units)])
    weights = start.astype(np.float64).copy()
    for _ in range(steps):
        logits = x @ weights.T / temperature
        probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        probabilities[np.arange(len(owner)), owner] -= 1
        weights -= 0.5 * (probabilities.T @ x / len(owner) / temperature + l2 * (weights - start))
    return weights


def variant_table(settings, conn, model, pages, items: list[dict]) -> dict[str, np.ndarray]:
    """Scores (question x page) of every page-representation variant for the questions `items`; the
    shipped representation first."""
    paths = [p["path"] for p in pages]

    def embed(texts: list[str]) -> np.ndarray:
        return np.stack([model.embed([t])[0] for t in texts])

    questions = {"raw": embed([q["q"] for q in items]), "no ?": embed([q["q"].rstrip().rstrip("?") for q in items])}
    lexical = np.full((len(items), len(paths)), np.inf)
    for row, item in enumerate(items):
        for rank, hit in enumerate(search.search(conn, item["q"], len(paths), settings)["results"], 1):
            lexical[row, paths.index(target_path(hit["url"], settings))] = rank

    def pooled(units, how):
        scores = []
        for vectors in units:
            cosines = questions["raw"] @ vectors.T
            centroid = vectors.mean(axis=0)
            centroid_cos = questions["raw"] @ (centroid / np.linalg.norm(centroid))
            if how == "centroid":
                scores.append(centroid_cos)
            elif how == "max-sim":
                scores.append(cosines.max(axis=1))
            elif how == "softmax-pooled (beta 10)":
                scores.append(np.log(np.exp(10 * cosines).mean(axis=1)) / 10)
            else:  # "blend a": a * max-sim + (1 - a) * centroid
                weight = float(how.split()[1])
                scores.append(weight * cosines.max(axis=1) + (1 - weight) * centroid_cos)
        return np.stack(scores, axis=1)

    centroid_units = [embed(joined_head_passages(p["title"], p["description"], p["text"])) for p in pages]
    split_units = [embed(ranker.passages(p["title"], p["description"], p["text"])) for p in pages]
    shipped = ranker.PageMatrix.from_rows(paths, [u.tobytes() for u in split_units])
    centroid = np.stack([u.mean(axis=0) / np.linalg.norm(u.mean(axis=0)) for u in centroid_units])
    table = {SHIPPED: np.stack([shipped.similarity(q) for q in questions["raw"]]),
             "shipped, question without trailing '?'": np.stack([shipped.similarity(q) for q in questions["no ?"]]),
             CENTROID: questions["raw"] @ centroid.T}
    for how in ("max-sim", "softmax-pooled (beta 10)", "blend 0.3", "blend 0.5"):
        table[f"passages, {how}"] = pooled(centroid_units, how)
    for how in ("centroid", "max-sim", "softmax-pooled (beta 10)", "blend 0.5"):
        table[f"split head + overlap, {how}"] = pooled(split_units, how)
    frequency = Counter(i for p in pages for i in model.tokenizer.encode(
        f"{p['title']}. {p['description']} {p['text']}", add_special_tokens=False).ids)
    total = sum(frequency.values())
    for a in (1e-4, 1e-3):
        sif_pages = np.stack([np.mean([sif_embed(model, x, frequency, total, a) for x in
                                       joined_head_passages(p["title"], p["description"], p["text"])], axis=0) for p in pages])
        sif_pages /= np.linalg.norm(sif_pages, axis=1, keepdims=True)
        sif_questions = np.stack([sif_embed(model, q["q"], frequency, total, a) for q in items])
        table[f"SIF token weights from the site's pages (a {a:g}), centroid"] = sif_questions @ sif_pages.T
    table.update(corpus_corrections(questions["raw"], centroid_units))
    sentence_units = [embed([f"{p['title']}. {p['description']}"] + [x for x in ranker._SENTENCE_END.split(p["text"])
                                                                      if len(x.strip()) > 20][:200]) for p in pages]
    table["sentences, mean of the best 3"] = np.stack(
        [np.sort(questions["raw"] @ u.T, axis=1)[:, -3:].mean(axis=1) for u in sentence_units], axis=1)
    table["page prototypes trained on the site's own passages (softmax regression from the centroids, L2 0.1)"] = \
        questions["raw"] @ trained_prototypes(centroid_units, centroid).T
    model_rank = np.argsort(np.argsort(-table[SHIPPED], axis=1), axis=1) + 1
    table["shipped + lexical, reciprocal-rank fusion (k 3, lexical 0.2)"] = 1 / (3 + model_rank) + 0.2 / (3 + lexical)
    for k, beta in ((2, 0.2), (5, 0.2), (10, 0.2)):  # Rocchio: the question moved towards its own top-k pages
        moved = questions["raw"] + beta * centroid[np.argsort(-table[CENTROID], axis=1)[:, :k]].mean(axis=1)
        table[f"centroid + pseudo-relevance feedback (Rocchio, k {k}, beta {beta})"] = \
            (moved / np.linalg.norm(moved, axis=1, keepdims=True)) @ centroid.T
    return table


def figures(scores: np.ndarray, targets: np.ndarray, picked: np.ndarray) -> tuple[float, float]:
    """Top-1 and MRR@10 of the questions `picked` (a mask), each question's target page by index."""
    ranks = (scores[picked] > scores[picked, targets[picked]][:, None]).sum(axis=1) + 1
    return (ranks == 1).mean(), np.where(ranks <= 10, 1 / ranks, 0).mean()


def variants(settings, conn) -> None:
    """Score page-representation variants on the evaluation set, whole and by half, and on the
    development set when there is one; print a table and which variant each protocol picks."""
    model = ranker.model_for(settings)
    pages = conn.execute("SELECT path, title, description, text FROM pages ORDER BY path").fetchall()
    paths = [p["path"] for p in pages]
    words = {p["path"]: content_words(f"{p['title']} {p['description']} {p['text']}") for p in pages}
    items = load_eval()["questions"]
    targets = np.array([paths.index(target_path(q["target"], settings)) for q in items])
    halves = np.array([fold(q["target"]) for q in items])
    no_word = np.array([shares_no_word(q["q"], words[paths[t]]) for q, t in zip(items, targets)])
    table = variant_table(settings, conn, model, pages, items)
    dev_items = json.loads(DEV.read_text(encoding="utf-8"))["questions"] if DEV.exists() else []
    if dev_items:
        dev_targets = np.array([paths.index(target_path(q["target"], settings)) for q in dev_items])
        dev_table = variant_table(settings, conn, model, pages, dev_items)
        dev_all = np.ones(len(dev_items), bool)

    everyone = np.ones(len(targets), bool)
    print(f"## /ask page-representation variants ({len(targets)} questions; half A {np.sum(halves == 'A')}, "
          f"half B {np.sum(halves == 'B')}, split by target page"
          + (f"; development set {len(dev_items)} questions" if dev_items else "") + ")\n")
    print("| variant | top-1 | MRR@10 | top-1 no-shared-word | A top-1 / MRR@10 | B top-1 / MRR@10 |"
          + (" development top-1 / MRR@10 |" if dev_items else "") + "\n|---|---|---|---|---|---|" + ("---|" if dev_items else ""))
    for name, scores in table.items():
        t1, mrr = figures(scores, targets, everyone)
        a, b = figures(scores, targets, halves == "A"), figures(scores, targets, halves == "B")
        dev = " {:.2f} / {:.3f} |".format(*figures(dev_table[name], dev_targets, dev_all)) if dev_items else ""
        print(f"| {name} | {t1:.2f} | {mrr:.3f} | {figures(scores, targets, no_word)[0]:.2f} | {a[0]:.2f} / {a[1]:.3f} "
              f"| {b[0]:.2f} / {b[1]:.3f} |{dev}")
    print()
    for chosen_on, held_out in (("A", "B"), ("B", "A")):
        best = max(table, key=lambda n: sum(figures(table[n], targets, halves == chosen_on)))
        got, base = figures(table[best], targets, halves == held_out), figures(table[SHIPPED], targets, halves == held_out)
        print(f"Chosen on half {chosen_on}: {best}; on held-out half {held_out}: top-1 {got[0]:.2f}, MRR@10 {got[1]:.3f} "
              f"(shipped: {base[0]:.2f}, {base[1]:.3f}).")
    if dev_items:
        # The rule, fixed before any variant was scored on the development set: ship the variant with
        # the highest top-1 + MRR@10 there (the shipped one on a tie); the evaluation set then
        # measures that choice without having made it.
        best = max(dev_table, key=lambda n: (sum(figures(dev_table[n], dev_targets, dev_all)), n == SHIPPED))
        got, base = figures(table[best], targets, everyone), figures(table[SHIPPED], targets, everyone)
        print(f"Chosen on the development set: {best}; on the evaluation set: top-1 {got[0]:.2f}, MRR@10 {got[1]:.3f} "
              f"(shipped: {base[0]:.2f}, {base[1]:.3f}).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quality", action="store_true", help="quality only")
    parser.add_argument("--variants", action="store_true", help="page-representation variants, 2-fold held out")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        settings, conn = scratch_site(Path(folder))
        if args.variants:
            return variants(settings, conn)
        judged = [(name, quality(settings, conn, data)) for name, data in judged_sets()]
        verdict_name, q = judged[-1]
        print(f"## /ask quality ({q['questions']} questions, {q['no_shared_word']} sharing no content word "
              f"with their target; {q['unanswerable']} unanswerable)\n")
        print("| questions | ranker | top-1 | MRR@10 | top-1 on no-shared-word questions | half A top-1 / MRR@10 "
              "| half B top-1 / MRR@10 | unanswerable mean top probability |\n|---|---|---|---|---|---|---|---|")
        for name, scores in judged:
            label = f"{name} ({scores['questions']} + {scores['unanswerable']} unanswerable)"
            for ranker_name in ("model", "lexical"):
                f = scores[ranker_name]
                halves = " | ".join(f"{f[h][0]:.2f} / {f[h][1]:.3f}" for h in "AB")
                unanswerable = f"{scores['unanswerable_mean_top_probability']:.3f}" if ranker_name == "model" else "—"
                print(f"| {label} | {ranker_name} | {f['top1']:.2f} | {f['mrr10']:.3f} | {f['top1_no_shared_word']:.2f} "
                      f"| {halves} | {unanswerable} |")

        def met(value: float, target: float) -> str:
            return "met" if value >= target else "**missed**"

        unanswerable = q['unanswerable_mean_top_probability']
        print(f"\nJudged on the {verdict_name} questions: top-1 >= 0.70 ({met(q['model']['top1'], 0.70)}), MRR@10 >= 0.80 "
              f"({met(q['model']['mrr10'], 0.80)}), unanswerable mean top probability < 0.2 "
              f"({'met' if unanswerable < 0.2 else '**missed**'}); answerable mean top probability "
              f"{q['answerable_mean_top_probability']:.3f}.")
        print("\nReproduce: `.venv/bin/python bench/bench_ask.py` (T and none_cosine: `bench/fit_ranker.py`, on the "
              "development set bench/ask_dev.json; page-representation variants with held-out halves and the "
              "development set: `--variants`).")
        if args.quality:
            return
        print()
        variants(settings, conn)
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
