"""Would /ask gain from a question adapter trained on the labelled questions? (Not shipped: this
measures why.)

    .venv/bin/python bench/bench_ask_adapter.py

The adapter is a linear map W (384 x 384, from the identity, L2 `lam` back towards it) applied
to a question's vector before the shipped similarity (ranker.PageMatrix), trained by gradient
descent on the softmax likelihood of each question's target page over the page centroids (T 0.04).
Two ways of holding questions out:
- by set: trained on two of the development, evaluation and test sets, measured on the third (new
  questions about pages it has questions for, as a next blind set would be);
- by page: trained on the questions about half the pages (sha256 of the path, even/odd), measured
  on the questions about the other half (the pages the owner writes after training: no question
  about them took part).
"""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_ask  # noqa: E402
from bench_ask import DEV, EVAL, TEST, scratch_site, target_path  # noqa: E402

from siteapi import ranker  # noqa: E402

STRENGTHS = (1.0, 0.1, 0.01)


def train(questions: np.ndarray, targets: np.ndarray, centroids: np.ndarray, lam: float,
          steps: int = 300, rate: float = 0.5, temperature: float = 0.04) -> np.ndarray:
    weights = np.eye(questions.shape[1])
    for _ in range(steps):
        mapped = questions @ weights.T
        norms = np.linalg.norm(mapped, axis=1, keepdims=True)
        unit = mapped / norms
        logits = unit @ centroids.T / temperature
        probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        probabilities[np.arange(len(targets)), targets] -= 1
        grad_unit = probabilities @ centroids / temperature / len(targets)
        grad_mapped = (grad_unit - unit * (grad_unit * unit).sum(axis=1, keepdims=True)) / norms
        weights -= rate * (grad_mapped.T @ questions + lam * (weights - np.eye(len(weights))))
    return weights


def figures(matrix: ranker.PageMatrix, questions: np.ndarray, targets: np.ndarray) -> tuple[float, float]:
    """Top-1 and MRR@10 of the shipped similarity for these question vectors."""
    scores = np.stack([matrix.similarity(q / np.linalg.norm(q)) for q in questions])
    return bench_ask.figures(scores, targets, np.ones(len(targets), dtype=bool))


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        settings, conn = scratch_site(Path(folder))
        matrix = ranker.page_matrix(conn)
        model = ranker.model_for(settings)
        sets = {}
        for name, path in (("development", DEV), ("evaluation", EVAL), ("test", TEST)):
            items = json.loads(path.read_text(encoding="utf-8"))["questions"]
            sets[name] = (np.stack([model.embed([q["q"]])[0] for q in items]).astype(np.float64),
                          np.array([matrix.paths.index(target_path(q["target"], settings)) for q in items]))
        conn.close()
    centroids = matrix.centroids.astype(np.float64)

    print(f"## /ask: a question adapter trained on the labelled questions ({sum(len(t) for _, t in sets.values())} "
          f"questions, {len(matrix.paths)} pages; not shipped)\n")
    print("| held out | shipped top-1 / MRR@10 | " + " | ".join(f"adapter, lam {lam}" for lam in STRENGTHS) + " |")
    print("|---|---|" + "---|" * len(STRENGTHS))
    for held in sets:
        trained = [name for name in sets if name != held]
        questions = np.concatenate([sets[name][0] for name in trained])
        targets = np.concatenate([sets[name][1] for name in trained])
        base = figures(matrix, *sets[held])
        cells = [figures(matrix, sets[held][0] @ train(questions, targets, centroids, lam).T, sets[held][1])
                 for lam in STRENGTHS]
        print(f"| the {held} set | {base[0]:.2f} / {base[1]:.3f} | "
              + " | ".join(f"{t1:.2f} / {mrr:.3f}" for t1, mrr in cells) + " |")
    questions = np.concatenate([q for q, _ in sets.values()])
    targets = np.concatenate([t for _, t in sets.values()])
    half = np.array([int(hashlib.sha256(p.encode()).hexdigest(), 16) % 2 for p in matrix.paths])[targets]
    for unseen in (0, 1):
        seen = half != unseen
        base = figures(matrix, questions[~seen], targets[~seen])
        cells = [figures(matrix, questions[~seen] @ train(questions[seen], targets[seen], centroids, lam).T,
                         targets[~seen]) for lam in STRENGTHS]
        print(f"| questions about half {'AB'[unseen]} of the pages, trained on the other half's | "
              f"{base[0]:.2f} / {base[1]:.3f} | " + " | ".join(f"{t1:.2f} / {mrr:.3f}" for t1, mrr in cells) + " |")
    print("\nReproduce: `.venv/bin/python bench/bench_ask_adapter.py` (about 20 seconds).")


if __name__ == "__main__":
    main()
