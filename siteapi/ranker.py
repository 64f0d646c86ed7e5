"""The /ask decision model: MiniLM-L6-v2 (int8 ONNX) sentence vectors and a probability per page.

The model and its tokenizer live in `models/` and are loaded lazily, once per process, behind a
lock; onnxruntime runs on one intra-op thread, and at most MODEL_RUNS questions are embedded at
once, so questions never take more than their cores from the other request threads; each caller
has one question embedded at a time, and a freed run goes to the question that waited longest.
Page vectors (one per passage: the title, the description, and the start of the body in
sentence-aligned, overlapping passages) are computed by the content job and cached in
`page_vectors` by content hash and representation, so a restart or an unchanged page costs nothing
and a changed representation re-embeds every page; the app keeps the matrices in memory until the
table changes.

How a question becomes scores: its vector's similarity to each page is a blend of its cosine with
the page's centroid and with the page's closest passage (PAGE_REPRESENTATION says how it was
chosen), and one softmax over similarity / T puts a probability on each page plus a "none of these"
pseudo-page whose similarity is fixed at `none_cosine`. T and `none_cosine` are fitted by
`bench/fit_ranker.py` on the project's own labelled development questions (`bench/ask_dev.json`):
the pair that maximises the likelihood of the right answer - the target page for answerable
questions, "none" for the questions the site cannot answer - over a grid (T 0.01..0.15,
none_cosine 0.10..0.60). The defaults below are that fit; `[ask] temperature` / `none_cosine`
override them. The evaluation questions (`bench/ask_eval.json`) measure it without having made it.

The int8 file ranks the evaluation questions as the float32 original weights do (top-1 0.71 and
MRR@10 0.788 vs 0.71 and 0.790, `bench/bench_ask_fp32.py`): quantization costs no quality here.
"""
from __future__ import annotations

import collections
import logging
import os
import re
import sqlite3
import threading
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from siteapi import db
from siteapi.config import ROOT, option

log = logging.getLogger(__name__)

# numpy's BLAS on one thread, as onnxruntime runs, for the whole process and from its start (no
# request thread is then inside a BLAS call): its thread per core, on cores the request threads
# share, made one product of the page matrix (2,046 pages) ten times slower (24 ms against 2 ms,
# pinned to one core; `bench/bench_ask.py`). Nothing in the app or the jobs wants threaded BLAS.
threadpool_limits(limits=1, user_api="blas")

MODEL_NAME = "minilm-l6-v2-int8"
# Stored in page_vectors.model: bump the suffix whenever passages() or what is stored changes, so
# vectors of the old representation are re-embedded by the next content run instead of mixed in.
# A page is the vectors of its passages; a question's similarity to it is a blend of the cosine with
# their centroid (what the whole page is about) and with its closest passage (the one paragraph that
# answers). Chosen among 23 representations by `bench/bench_ask.py --variants` on a development set
# of 92 questions written without sight of the evaluation set or the ranker, by a rule fixed before
# any variant was scored on that set: this one scored highest there (top-1 0.75, MRR@10 0.832; the
# centroid of "title. description" and body passages before it: 0.72, 0.808). Max-sim alone,
# softmax pooling, SIF weights, centring, whitening, hubness correction and pseudo-relevance
# feedback scored lower.
PAGE_REPRESENTATION = f"{MODEL_NAME}/passages-v2"
MAX_SIM_WEIGHT = 0.3
DIM = 384
DEFAULT_MODEL_PATH = "models/minilm-l6-v2-int8.onnx"
DEFAULT_TOKENIZER_PATH = "models/tokenizer.json"
DEFAULT_TEMPERATURE = 0.04
DEFAULT_NONE_COSINE = 0.33
DEFAULT_DEADLINE_MS = 250
PAGE_TOKENS = 256      # the model's window; chunks stay well inside it
QUESTION_CHARS = 1000  # a 5 KB question is cut before tokenising; its start carries the intent
CHUNK_CHARS = 400      # body passages of about 90 tokens, near the length the model was trained on
PAGE_CHUNKS = 8        # the start of the body: at most this many passages per page
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

SCHEMA = """
CREATE TABLE IF NOT EXISTS page_vectors (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    path TEXT NOT NULL UNIQUE,
    hash TEXT NOT NULL,
    model TEXT NOT NULL,
    vector BLOB NOT NULL
);
-- A new random number from every refresh that changes `page_vectors`, as photos_state is for the
-- photo index: a site.db restored from a backup of another lineage can hold as many vectors under
-- the same highest id as the file it replaced, and must not be served that file's matrix.
CREATE TABLE IF NOT EXISTS page_vectors_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL
);
"""


class EmbeddingTimeout(Exception):
    """Embedding the question took longer than its deadline."""


@dataclass(frozen=True)
class RankerSettings:
    model_path: Path
    tokenizer_path: Path
    temperature: float
    none_cosine: float
    deadline_ms: float
    prev_weight: float

    @classmethod
    def from_settings(cls, settings=None) -> "RankerSettings":
        def path(key: str, default: str) -> Path:
            value = Path(option(settings, "ask", key, default))
            return value if value.is_absolute() else ROOT / value

        return cls(
            model_path=path("model_path", DEFAULT_MODEL_PATH),
            tokenizer_path=path("tokenizer_path", DEFAULT_TOKENIZER_PATH),
            temperature=option(settings, "ask", "temperature", DEFAULT_TEMPERATURE, 0.001, 10),
            none_cosine=option(settings, "ask", "none_cosine", DEFAULT_NONE_COSINE, -1, 1),
            deadline_ms=option(settings, "ask", "deadline_ms", float(DEFAULT_DEADLINE_MS), 0, 600_000),
            prev_weight=option(settings, "ask", "prev_weight", 0.35, 0, 1),
        )


class Model:
    """The ONNX session and tokenizer; `embed` is safe to call from many threads at once."""

    def __init__(self, model_path: Path, tokenizer_path: Path):
        import onnxruntime
        from tokenizers import Tokenizer

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        self.session = onnxruntime.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self.tokenizer.enable_truncation(PAGE_TOKENS)
        self.tokenizer.no_padding()

    def embed(self, texts: list[str]) -> np.ndarray:
        """L2-normalised mean-pooled vectors, one row per text (float32, 384 wide)."""
        # encode() one by one: encode_batch fans out over every core, which the one-thread rule forbids.
        encodings = [self.tokenizer.encode(text) for text in texts]
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(texts), width), dtype=np.int64)
        mask = np.zeros((len(texts), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
        tokens = self.session.run(None, {"input_ids": ids, "attention_mask": mask,
                                         "token_type_ids": np.zeros_like(ids)})[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (tokens * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)


class FairRuns:
    """A semaphore that hands a freed run to the longest waiter. threading's lets the thread that
    releases take it straight back, so one question of eleven texts kept the runs from a waiting
    question of one until its deadline passed."""

    def __init__(self, runs: int):
        self._free = runs
        self._waiting: collections.deque[threading.Lock] = collections.deque()
        self._lock = threading.Lock()

    def acquire(self, timeout: float) -> bool:
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                return True
            turn = threading.Lock()
            turn.acquire()
            self._waiting.append(turn)
        if turn.acquire(timeout=timeout):
            return True
        with self._lock:
            if turn in self._waiting:
                self._waiting.remove(turn)
                return False
        return True  # handed over as the wait ran out

    def release(self) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().release()
            else:
                self._free += 1


# Questions embedded at once in the process, each on one core: one core is left to the requests that
# are not questions (on the 2-core machine, one question at a time; a run takes 4-30 ms).
MODEL_RUNS = max(1, (os.cpu_count() or 2) - 1)
_model_runs = FairRuns(MODEL_RUNS)
# And one question at a time per caller: a caller's burst queues behind its own question instead of
# taking every run, so another caller's question waits for one run at most. Callers are hashed onto
# lanes; two that share one take turns as well.
CALLER_LANES = 64
_caller_lanes = [threading.Lock() for _ in range(CALLER_LANES)]
_models: dict[tuple[Path, Path], Model] = {}
_failed: dict[tuple[Path, Path], tuple | None] = {}  # the files' state when loading them failed
_models_lock = threading.Lock()


def _files_state(key: tuple[Path, Path]) -> tuple | None:
    try:
        return tuple((stat.st_mtime_ns, stat.st_size) for stat in (path.stat() for path in key))
    except OSError:
        return None


def model_for(settings) -> Model | None:
    """The process's model for the [ask] files `settings` name (load_model)."""
    return load_model(RankerSettings.from_settings(settings))


def load_model(config: RankerSettings) -> Model | None:
    """The process's model for these files, loaded on first use; None when it cannot be loaded
    (missing or unreadable file), so callers fall back instead of failing. A failed load is tried
    again once the files change, so a long-running process picks up a model put back in place."""
    key = (config.model_path, config.tokenizer_path)
    if key in _models:
        return _models[key]
    state = _files_state(key)
    if key in _failed and _failed[key] == state:
        return None
    with _models_lock:
        if key not in _models:
            try:
                _models[key] = Model(*key)
            except Exception as exc:  # onnxruntime and tokenizers raise their own error types
                log.warning("ask model unavailable (%s): %s", config.model_path, exc)
                _failed[key] = state
                return None
        return _models[key]


def passages(title: str, description: str, text: str) -> list[str]:
    """The title, the description, then the start of the body in sentence-aligned passages of up to
    CHUNK_CHARS, each opening with the last sentence of the one before when that one holds several
    and the sentence fits, so a statement cut at a passage's edge is whole in one of them. Empty
    parts are left out."""
    body, current = [], []
    for sentence in (s for s in _SENTENCE_END.split(text) if s.strip()):
        if current and len(" ".join([*current, sentence])) > CHUNK_CHARS:
            body.append(" ".join(current))
            if len(body) == PAGE_CHUNKS:
                break
            carried = current[-1:] if len(current) > 1 else []
            current = carried if len(" ".join([*carried, sentence])) <= CHUNK_CHARS else []
        current.append(sentence)
    else:
        body += [" ".join(current)] if current else []
    return [p for p in (title, description, *body) if p.strip()] or [title or " "]


def passage_vectors(model: Model, title: str, description: str, text: str) -> np.ndarray:
    """One vector per passage (rows, float32): what `page_vectors` stores for a page."""
    # One passage per run: batching is no faster on one thread and holds far more memory.
    return np.stack([model.embed([p])[0] for p in passages(title, description, text)])


@dataclass
class Embedded:
    """What `missing_vectors` made: vectors by path, (hash, blob), and the pages whose text the
    model failed on, by path, with why (they go without a vector: the model ranking leaves them out)."""
    vectors: dict[str, tuple[str, bytes]]
    failed: dict[str, str]


def _sound(blob: bytes) -> bool:
    """A stored vector blob this version can read: whole rows of DIM float32 values, all finite."""
    return bool(blob) and len(blob) % (DIM * 4) == 0 and bool(np.isfinite(np.frombuffer(blob, dtype=np.float32)).all())


def missing_vectors(conn: sqlite3.Connection, pages: list, settings=None) -> Embedded | None:
    """Vectors for the `pages` (rows with path, hash, title, description, text: what `pages` will
    hold) that `page_vectors` lacks (or holds damaged), embedded now, outside any transaction.
    None without a model: nothing is to change (the app then ranks lexically)."""
    model = model_for(settings)
    if model is None:
        return None
    stored = {r["path"]: (r["hash"], r["model"]) for r in conn.execute("SELECT path, hash, model, vector FROM page_vectors")
              if _sound(r["vector"])}
    stale = [p for p in pages if stored.get(p["path"]) != (p["hash"], PAGE_REPRESENTATION)]
    embedded = Embedded({}, {})
    # A progress bar on a terminal (`jobs.py run content`); tqdm stays silent under the scheduler.
    for page in tqdm(stale, desc="page vectors", unit="page", disable=None):
        try:
            vectors = passage_vectors(model, page["title"], page["description"], page["text"])
        except Exception as exc:  # onnxruntime's and tokenizers' own error types: one page, not the run
            embedded.failed[page["path"]] = f"{type(exc).__name__}: {exc}"
            continue
        embedded.vectors[page["path"]] = (page["hash"], vectors.tobytes())
    return embedded


def store_vectors(conn: sqlite3.Connection, embedded: Embedded) -> None:
    """Within the caller's transaction, once `pages` holds what the vectors were made for: the new
    vectors in, and out those of pages that are gone or whose new text failed."""
    gone = {path for (path,) in conn.execute("SELECT path FROM page_vectors WHERE path NOT IN (SELECT path FROM pages)")}
    out = gone | set(embedded.vectors) | set(embedded.failed)
    if not out:
        return
    conn.executemany("DELETE FROM page_vectors WHERE path = ?", [(path,) for path in out])
    conn.executemany("INSERT INTO page_vectors(path, hash, model, vector) VALUES (?, ?, ?, ?)",
                     [(path, digest, PAGE_REPRESENTATION, blob) for path, (digest, blob) in embedded.vectors.items()])
    conn.execute("INSERT INTO page_vectors_state (id, generation) VALUES (1, random()) "
                 "ON CONFLICT (id) DO UPDATE SET generation = excluded.generation")


def refresh_page_vectors(conn: sqlite3.Connection, settings=None) -> int:
    """Embed the pages of `pages` that are new or whose hash changed, drop vectors of deleted pages;
    return how many pages were embedded (the content job does the same in its pages' transaction)."""
    conn.isolation_level = None
    embedded = missing_vectors(conn, conn.execute("SELECT path, hash, title, description, text FROM pages").fetchall(),
                               settings)
    if embedded is None:
        return 0
    with db.transaction(conn):
        store_vectors(conn, embedded)
    return len(embedded.vectors)


@dataclass(frozen=True)
class PageMatrix:
    """Every page's passage vectors, and the centroid of each page's (L2-normalised)."""
    paths: list[str]
    centroids: np.ndarray  # (pages, 384)
    passages: np.ndarray   # (passages, 384): each page's rows together, pages in `paths` order
    starts: np.ndarray     # the row in `passages` where each page's begin

    @classmethod
    def from_rows(cls, paths: list[str], blobs: list[bytes]) -> "PageMatrix":
        """The matrix of these pages' stored blobs; a page whose blob is damaged is left out (the
        content job embeds it again)."""
        kept = [(path, blob) for path, blob in zip(paths, blobs) if _sound(blob)]
        paths = [path for path, _ in kept]
        vectors = [np.frombuffer(blob, dtype=np.float32).reshape(-1, DIM) for _, blob in kept]
        if not vectors:
            return cls([], np.zeros((0, DIM), np.float32), np.zeros((0, DIM), np.float32), np.zeros(0, np.int64))
        centroids = np.stack([v.mean(axis=0) for v in vectors])
        centroids /= np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-12)
        starts = np.cumsum([0] + [len(v) for v in vectors[:-1]])
        return cls(paths, centroids.astype(np.float32), np.concatenate(vectors), starts)

    def similarity(self, question_vec: np.ndarray) -> np.ndarray:
        """Each page's similarity to the question: MAX_SIM_WEIGHT of the cosine with its closest
        passage, the rest the cosine with its centroid (see PAGE_REPRESENTATION)."""
        closest = np.maximum.reduceat(self.passages @ question_vec, self.starts) if len(self.starts) else self.starts
        return (1 - MAX_SIM_WEIGHT) * (self.centroids @ question_vec) + MAX_SIM_WEIGHT * closest


_matrices: dict[str, tuple[tuple, PageMatrix]] = {}
_matrices_lock = threading.Lock()


def page_matrix(conn: sqlite3.Connection) -> PageMatrix:
    """Every cached page vector as one matrix, reloaded only when `page_vectors` changed: the
    refresh's random generation tells files of different lineages apart, and (count, max id) any
    write that bypassed the refresh, since rows are only ever deleted and inserted with
    AUTOINCREMENT ids."""
    database = conn.execute("PRAGMA database_list").fetchone()["file"]
    # Answered from indexes (count from the small path index, max from the rowid): no blob is read.
    version = tuple(conn.execute("SELECT (SELECT generation FROM page_vectors_state WHERE id = 1), "
                                 "count(*), max(id) FROM page_vectors").fetchone())
    cached = _matrices.get(database)
    if cached and cached[0] == version:
        return cached[1]
    rows = conn.execute("SELECT path, vector FROM page_vectors WHERE model = ? ORDER BY path", (PAGE_REPRESENTATION,)).fetchall()
    matrix = PageMatrix.from_rows([r["path"] for r in rows], [r["vector"] for r in rows])
    with _matrices_lock:
        _matrices[database] = (version, matrix)
    return matrix


def embed_question(model: Model, question: str, prev: list[str], config: RankerSettings,
                   caller: str = "") -> np.ndarray:
    """The question's vector, blended with the earlier questions at `prev_weight` (their mean),
    within the deadline; raises EmbeddingTimeout when it cannot be had in time. Texts are read in
    NFKC form: the vocabulary knows full-width and styled letters only as [UNK].

    Each text is embedded on its own, at most MODEL_RUNS at once in the process and one question
    of each `caller` at a time, and the deadline is checked before each run as well as after the
    last. A batch pads every row to the longest, so ten short earlier questions beside a 5 KB one
    cost eleven full windows; and eight such questions at once, each certain to overrun, had taken
    the app from 180 MB to over 1 GB, which the allocator kept, for answers that were then not
    used. Now a question stops at the first run past its deadline, one waiting for a free run past
    its deadline never starts, and the deadline bounds the wait as well as the work (onnxruntime
    cannot be interrupted mid-run)."""
    started = time.perf_counter()
    deadline = started + config.deadline_ms / 1000
    vectors = []
    lane = _caller_lanes[hash(caller) % CALLER_LANES]
    if not lane.acquire(timeout=max(0.0, deadline - started)):
        raise EmbeddingTimeout(f"the caller's earlier question held the model past {config.deadline_ms:g} ms")
    try:
        for text in [question, *prev]:
            remaining = deadline - time.perf_counter()
            if remaining <= 0 or not _model_runs.acquire(timeout=remaining):
                raise EmbeddingTimeout(f"the question and {len(prev)} earlier ones were not embedded within "
                                       f"{config.deadline_ms:g} ms ({len(vectors)} done)")
            try:
                vectors.append(model.embed([unicodedata.normalize("NFKC", text[:QUESTION_CHARS])])[0])
            finally:
                _model_runs.release()
    finally:
        lane.release()
    elapsed_ms = (time.perf_counter() - started) * 1000
    if elapsed_ms > config.deadline_ms:
        raise EmbeddingTimeout(f"embedding took {elapsed_ms:.1f} ms, deadline {config.deadline_ms:g} ms")
    vector = vectors[0]
    if prev:
        vector = vector + config.prev_weight * np.mean(vectors[1:], axis=0)
        vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
    return vector


def rank(similarities: np.ndarray, temperature: float = DEFAULT_TEMPERATURE,
         none_cosine: float = DEFAULT_NONE_COSINE) -> np.ndarray:
    """Probabilities over the pages (their similarities to the question) plus a last "none of
    these" entry; they sum to 1."""
    logits = np.append(similarities, none_cosine) / temperature
    logits -= logits.max()
    weights = np.exp(logits)
    return weights / weights.sum()
