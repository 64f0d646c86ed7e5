"""Fit the /ask ranker's temperature T and "none of these" cosine on the project's own questions.

    .venv/bin/python bench/fit_ranker.py

Builds a scratch site.db from content/, embeds every question of the development set
(bench/ask_dev.json: written for choosing and fitting, so the evaluation set, bench/ask_eval.json,
measures the fit without having made it) once, and searches a grid (T 0.01..0.15 by 0.005, none_cosine 0.10..0.60 by 0.01) for the pair that maximises
the likelihood of the right answer: the target page for answerable questions, the "none" entry
for the unanswerable ones. Prints the pair (to put under [ask] in site.toml, or as the defaults in
siteapi/ranker.py) and what it gives: the mean probability on the right page and the mean top
probability on unanswerable questions. Ranking order does not depend on T or none_cosine; only
the probabilities do.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ask import DEV, scratch_site, target_path  # noqa: E402

from siteapi import ranker  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        settings, conn = scratch_site(Path(folder))
        matrix = ranker.page_matrix(conn)
        model = ranker.model_for(settings)
        data = json.loads(DEV.read_text(encoding="utf-8"))
        answerable = np.stack([matrix.similarity(model.embed([q["q"]])[0]) for q in data["questions"]])
        unanswerable = np.stack([matrix.similarity(model.embed([q])[0]) for q in data["unanswerable"]])
        targets = np.array([matrix.paths.index(target_path(q["target"], settings)) for q in data["questions"]])
        conn.close()

    def log_probabilities(cosines: np.ndarray, temperature: float, none_cosine: float) -> np.ndarray:
        logits = np.concatenate([cosines, np.full((len(cosines), 1), none_cosine)], axis=1) / temperature
        logits -= logits.max(axis=1, keepdims=True)
        return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))

    best = None
    for temperature in np.arange(0.01, 0.1501, 0.005):
        for none_cosine in np.arange(0.10, 0.6001, 0.01):
            right = log_probabilities(answerable, temperature, none_cosine)[np.arange(len(targets)), targets]
            none = log_probabilities(unanswerable, temperature, none_cosine)[:, -1]
            likelihood = right.sum() + none.sum()
            if best is None or likelihood > best[0]:
                best = (likelihood, round(float(temperature), 3), round(float(none_cosine), 2))
    _, temperature, none_cosine = best
    right = np.exp(log_probabilities(answerable, temperature, none_cosine)[np.arange(len(targets)), targets])
    unanswered_top = np.exp(log_probabilities(unanswerable, temperature, none_cosine)[:, :-1]).max(axis=1)
    top1 = (answerable.argmax(axis=1) == targets).mean()
    print(f"temperature = {temperature}\nnone_cosine = {none_cosine}")
    print(f"{len(targets)} answerable questions: top-1 {top1:.2f}, mean probability on the right page {right.mean():.3f}")
    print(f"{len(unanswerable)} unanswerable questions: mean top page probability {unanswered_top.mean():.3f}")


if __name__ == "__main__":
    main()
