"""Photo archive benchmarks: ingest photos/s per core (24 MP JPEG) and query median on 100,000 rows.

Run: `python bench/bench_photos.py` (pinned to one core for the ingest figures). Prints its figures.
The synthetic rows carry caption vectors from the /ask model (2,000 distinct captions, embedded once
and shared), so queries with a term no caption contains run the semantic path over a full matrix.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PIL import Image  # noqa: E402

from siteapi import db, demo_photos, exif, ingest, photos, ranker  # noqa: E402
from siteapi.config import load_settings  # noqa: E402

ROWS = 100_000
CAPTIONS = 2_000


def big_jpeg() -> bytes:
    """A 24-megapixel (6000x4000) JPEG with a demo photo's Fujifilm metadata written in."""
    small = Image.open(io.BytesIO(demo_photos.make_jpeg(demo_photos.DEMOS[0], 0)))
    image = small.resize((6000, 4000), Image.Resampling.BICUBIC)
    noise = Image.effect_noise((6000, 4000), 40).convert("RGB")  # texture, so the JPEG is camera-sized
    image = Image.blend(image, noise, 0.15)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=92, exif=small.getexif().tobytes())
    return buffer.getvalue()


def bench_ingest(tmp: Path) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    data = big_jpeg()
    print(f"ingest: 24 MP JPEG of {len(data) / 1e6:.1f} MB, one core")
    runs = 5
    start = time.perf_counter()
    for i in range(runs):
        ingest.make_thumbnails(data, f"bench{i}", tmp / "public")
        exif.read_metadata(data)
    full = runs / (time.perf_counter() - start)
    runs = 500
    start = time.perf_counter()
    for _ in range(runs):
        exif.read_metadata(data)
    meta_only = runs / (time.perf_counter() - start)
    print(f"  metadata + four thumbnails: {full:.2f} photos/s per core (target >= 0.8)")
    print(f"  metadata alone:             {meta_only:.0f} photos/s per core (target >= 200)")


def fill(conn, count: int, model: ranker.Model) -> None:
    rng = random.Random(7)
    words = ("beach harbour mountain street night market tram kite snow fog lake bridge cat dog portrait "
             "window rain sunset dawn forest river city bicycle boat garden").split()
    captions = [" ".join(rng.sample(words, 4)).capitalize() for _ in range(CAPTIONS)]
    caption_vectors = [model.embed([caption])[0].tobytes() for caption in captions]
    cameras = ["FUJIFILM X100VI", "FUJIFILM X-T5", "FUJIFILM X-Pro3", "FUJIFILM X-E4", "SONY ILCE-7M4", "RICOH GR III"]
    lenses = ["XF23mmF2 R WR", "XF33mmF1.4 R LM WR", "XF56mmF1.2 R WR", None]
    films = ["Classic Negative", "Classic Chrome", "Reala ACE", "Velvia", "Acros+R", "Eterna", "Provia", None]
    payload, vectors = [], []
    for i in range(count):
        film = rng.choice(films)
        year = rng.randrange(2015, 2027)
        taken = f"{year}:{rng.randrange(1, 13):02d}:{rng.randrange(1, 29):02d} {rng.randrange(24):02d}:00:00"
        recipe = {"Film Simulation": film, "Dynamic Range": rng.choice(["DR100", "DR200", "DR400"]),
                  "Clarity": rng.choice(["-2", "0", "+2"])} if film else None
        meta = {"camera": rng.choice(cameras), "lens": rng.choice(lenses), "film": film, "date": taken}
        if recipe:
            meta["recipe"] = recipe
        caption = rng.randrange(CAPTIONS)
        vectors.append((f"{i:064x}", ranker.MODEL_NAME, caption_vectors[caption]))
        payload.append((f"P{i:06d}", f"P{i:06d}.jpg", f"{i:064x}", "0", 1000, captions[caption],
                        meta["camera"], meta["lens"], film, taken[:10].replace(":", "-"), taken, year,
                        json.dumps(recipe) if recipe else None, exif.recipe_text(recipe) or None, json.dumps(meta),
                        "a.avif", "a.jpg", "a-400.jpg", "a-200.jpg", ingest.expansion_words(meta), "exiv2", "bench",
                        "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z"))
    marks = ", ".join("?" for _ in ingest.PHOTO_COLUMNS)
    with db.transaction(conn):
        conn.executemany(f"INSERT INTO photos ({', '.join(ingest.PHOTO_COLUMNS)}) VALUES ({marks})", payload)
        conn.executemany("INSERT INTO photo_vectors (sha256, model, vector) VALUES (?, ?, ?)", vectors)


def bench_query(tmp: Path) -> None:
    settings = dataclasses.replace(load_settings(), db_path=tmp / "site.db")
    conn = db.connect(settings.db_path)
    conn.isolation_level = None
    conn.executescript(photos.SCHEMA)
    model = ranker.model_for(settings)
    if model is None:
        sys.exit("The /ask model is missing from models/; the photo query bench needs it for caption vectors.")
    fill(conn, ROWS, model)
    reader = db.connect(settings.db_path, readonly=True)
    cases = {
        "q + camera + film": {"q": "beach night", "camera": "x-t5", "film": "classic"},
        "q + recipe + from": {"q": "harbour", "recipe": "DR400", "from": "2020-01-01"},
        "filters only (camera + film)": {"camera": "x100", "film": "acros"},
        "q alone": {"q": "tram"},
        "q semantic + literal + camera": {"q": "seaside kite", "camera": "x-t5"},
        "q semantic alone": {"q": "seaside"},
        "q semantic + three filters": {"q": "seaside", "camera": "x-t5", "film": "acros", "from": "2025-01-01"},
    }
    # A semantic term's matching rows are kept per index: repeats (paging) skip the matrix scan.
    # "cold" clears that and the term-vector cache before each call: a term no earlier query used.
    start = time.perf_counter()
    photos.query(reader, settings, {"q": "warmup"})  # also loads the model
    print(f"query: {ROWS:,} synthetic rows; first call (builds the in-memory index) "
          f"{(time.perf_counter() - start) * 1000:.0f} ms; median of 50 calls:")
    for (name, params), cold in [(case, False) for case in cases.items()] + [
            (case, True) for case in cases.items() if case[0].startswith("q semantic")]:
        timings = []
        for _ in range(50):
            if cold:
                photos._term_vector.cache_clear()
                for _, index in photos._indexes.values():
                    index.semantic_rows.clear()
            start = time.perf_counter()
            body = photos.query(reader, settings, params)
            timings.append((time.perf_counter() - start) * 1000)
        print(f"  {name + (', cold' if cold else ''):38} median {statistics.median(timings):6.1f} ms  "
              f"(total {body['total']}, semantic {body['ranking']['semantic']})")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bench_query(Path(tmp))
        bench_ingest(Path(tmp))


if __name__ == "__main__":
    main()
