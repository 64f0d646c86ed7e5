"""The photo ingest job on the project's own demo photos and, when present, the shared real camera files."""
from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import time
from pathlib import Path

import exiv2
import numpy as np
import pytest
from PIL import Image, ImageCms

import jobs
from siteapi import db, demo_photos, exif, ingest, photos, ranker
from siteapi.config import load_settings
from conftest import SHARED

REAL_PHOTOS = SHARED / "data" / "photos"
SECRETS = ("DEMO-SERIAL-0042", "FFDT00424242", "DEMO-LENS-77", "Demo Owner", "3012/100", "5123/100")
REAL_SECRETS = ("FFDT22873443", "FF02B8054953", "4B005176", "58A15074", "Victor Quiroz", "victorhqc.com")


def make_settings(tmp: Path, **changes):
    return dataclasses.replace(load_settings(), db_path=tmp / "site.db", photos_dir=tmp / "originals",
                               images_dir=tmp / "public", **changes)


def rows(settings) -> dict[str, dict]:
    conn = db.connect(settings.db_path, readonly=True)
    try:
        return {row["stem"]: dict(row) for row in conn.execute("SELECT * FROM photos")}
    finally:
        conn.close()


def db_text(settings) -> str:
    conn = db.connect(settings.db_path)
    try:
        return "\n".join(conn.iterdump())
    finally:
        conn.close()


def thumbnail_files(settings) -> set[str]:
    """The files at the top of images_dir (the public copies of the originals live in full/)."""
    return {path.name for path in settings.images_dir.iterdir() if path.is_file()}


def public_copies(settings) -> set[str]:
    full = settings.images_dir / ingest.FULL_DIR
    return {path.name for path in full.iterdir()} if full.is_dir() else set()


def assert_no_metadata(path: Path):
    image = exiv2.ImageFactory.open(str(path))
    image.readMetadata()
    assert image.exifData().count() == 0, f"{path.name} carries EXIF"
    assert image.iptcData().count() == 0, f"{path.name} carries IPTC"
    assert image.xmpData().count() == 0, f"{path.name} carries XMP"


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("archive")
    settings = make_settings(tmp)
    demo_photos.generate(settings.photos_dir, count=len(demo_photos.DEMOS))
    summary = ingest.run_photos(settings)
    return settings, summary, rows(settings)


def test_first_run_adds_every_demo_photo(archive):
    settings, summary, table = archive
    assert summary == f"added {len(demo_photos.DEMOS)}, updated 0, removed 0, failed 0"
    assert set(table) == {demo.stem for demo in demo_photos.DEMOS}
    assert all(row["extractor"] == "exiv2" and row["extractor_version"] == exif.EXTRACTOR_VERSION
               for row in table.values())


def test_recipe_round_trip_classic_negative(archive):
    meta = json.loads(archive[2]["DSCF0101"]["metadata"])
    assert meta["recipe"] == {
        "Film Simulation": "Classic Negative", "Dynamic Range": "DR200", "Grain Effect": "Strong / Small",
        "Color Chrome Effect": "Strong", "Color Chrome FX Blue": "Off", "White Balance": "4700K, R+4 / B-2",
        "Highlight": "-2", "Shadow": "0", "Color": "+4", "Sharpness": "-1", "High ISO NR": "-4",
        "Clarity": "0", "ISO": "320", "Exposure Compensation": "-1/3",
    }
    assert meta["camera"] == "FUJIFILM X100VI" and meta["lens"] is None
    assert (meta["aperture"], meta["shutter"], meta["iso"], meta["focal"], meta["ev"]) == ("f/5.6", "1/500", 320, "23 mm", -0.33)
    assert (meta["wb_shift"], meta["color_temp"], meta["dr"], meta["dr_value"]) == ("R+4 / B-2", 4700, "DR200", 200)
    assert meta["date"] == "2023:01:14 08:12:03" and (meta["width"], meta["height"]) == (1200, 800)


@pytest.mark.parametrize("stem, film", [
    ("DSCF0102", "Reala ACE"), ("DSCF0103", "Acros+R"), ("DSCF0104", "Acros+Ye"), ("DSCF0105", "Velvia"),
    ("DSCF0106", "Classic Chrome"), ("DSCF0107", "Eterna"), ("DSCF0108", "Astia"), ("DSCF0109", "Nostalgic Neg."),
    ("DSCF0110", "Monochrome"), ("DSCF0111", "Pro Neg. Hi"), ("DSCF0113", "Eterna Bleach Bypass"),
    ("DSCF0114", "Sepia"), ("DSCF0118", "Acros+G"), ("DSCF0119", "Provia"), ("DSCF0121", "Monochrome+Ye"),
])
def test_film_simulations_named_as_photographers_do(archive, stem, film):
    row = archive[2][stem]
    assert row["film"] == film
    assert json.loads(row["recipe"])["Film Simulation"] == film
    assert f"Film Simulation: {film}" in row["recipe_text"]


def test_every_recipe_field_as_written(archive):
    table = archive[2]
    for demo in demo_photos.DEMOS:
        if not demo.fuji:
            continue
        spec, meta = demo.fuji, json.loads(table[demo.stem]["metadata"])
        card = meta["recipe"]

        def signed(value):
            text = f"{value:+.1f}".rstrip("0").rstrip(".")
            return "0" if text in ("+0", "-0") else text
        assert card["Highlight"] == signed(spec["highlight"]), demo.stem
        assert card["Shadow"] == signed(spec["shadow"]), demo.stem
        assert meta["wb_shift"] == f"R{signed(spec['shift'][0])} / B{signed(spec['shift'][1])}", demo.stem
        assert card["Sharpness"] == signed(spec["sharp"]) and card["High ISO NR"] == signed(spec["nr"]), demo.stem
        assert meta["dr_value"] == spec["dr"][1]
        assert card["Dynamic Range"] == ("DR-Auto" if spec["dr"][0] == 0 else f"DR{spec['dr'][1]}"), demo.stem
        if spec["mono"] is None:
            assert card["Color"] == signed(spec["color"]), demo.stem
        else:
            assert "Color" not in card and meta["saturation"] is None, demo.stem
        if spec["modern"]:
            assert meta["clarity"] == spec["clarity"] and card["Clarity"] == signed(spec["clarity"]), demo.stem
            assert (meta["grain"], meta["grain_size"]) == spec["grain"], demo.stem
            assert (meta["chrome"], meta["chrome_blue"]) == (spec["chrome"], spec["blue"]), demo.stem
            grain = spec["grain"][0] if spec["grain"][0] == "Off" else " / ".join(spec["grain"])
            assert card["Grain Effect"] == grain, demo.stem


def test_half_step_tones_and_white_balance_names(archive):
    card = json.loads(archive[2]["DSCF0102"]["recipe"])
    assert (card["Highlight"], card["Shadow"]) == ("-1.5", "+0.5")
    assert card["White Balance"] == "Daylight, R+1 / B-3"
    assert card["Clarity"] == "-2" and card["Exposure Compensation"] == "+2/3"
    assert json.loads(archive[2]["DSCF0107"]["recipe"])["Dynamic Range"] == "DR-Auto"


def test_old_body_records_no_grain_chrome_or_clarity(archive):
    meta = json.loads(archive[2]["DSCF0115"]["metadata"])
    for key in ("grain", "grain_size", "chrome", "chrome_blue", "clarity"):
        assert key in meta and meta[key] is None
    assert "Grain Effect" not in meta["recipe"] and "Clarity" not in meta["recipe"]


def test_other_makers_have_no_recipe_but_every_field(archive):
    meta = json.loads(archive[2]["DSC01234"]["metadata"])
    assert "recipe" not in meta and meta["film"] is None and meta["clarity"] is None
    assert meta["camera"] == "SONY ILCE-7M4" and meta["lens"] == "FE 24-70mm F2.8 GM II"
    assert archive[2]["DSC01234"]["recipe"] is None and archive[2]["DSC01234"]["film"] is None
    assert json.loads(archive[2]["R0001234"]["metadata"])["camera"] == "RICOH GR III"


def test_captions_from_xmp_iptc_exif_and_sidecar(archive):
    table = archive[2]
    assert table["DSCF0101"]["alt"] == "Fishing boats moored in the harbour at dawn"  # XMP
    assert table["DSCF0102"]["alt"] == "Beach at low tide with a red kite"  # IPTC
    assert table["DSCF0103"]["alt"] == "Neon signs on a rainy street at night"  # EXIF
    assert table["DSCF0104"]["alt"] == "Cathedral ceiling looking straight up"  # sidecar
    assert table["DSCF0122"]["alt"] is None
    long_alt = table["DSCF0114"]["alt"]
    assert len(long_alt) <= 240 and long_alt.endswith("…") and long_alt.startswith("Frozen lake with skaters")


def test_thumbnails_sized_hashed_and_free_of_metadata(archive):
    settings, _, table = archive
    row = table["DSCF0108"]  # portrait 800x1200
    files = {kind: settings.images_dir / row["thumb_" + kind] for kind in ("avif", "jpg", "small", "xs")}
    assert row["thumb_small"].startswith("DSCF0108-400.") and row["thumb_xs"].startswith("DSCF0108-200.")
    assert row["thumb_avif"].endswith(".avif") and row["thumb_jpg"].endswith(".jpg")
    sizes = {}
    for kind, path in files.items():
        with Image.open(path) as image:
            sizes[kind] = image.size
            assert image.format == ("AVIF" if kind == "avif" else "JPEG")
    assert sizes == {"avif": (800, 1200), "jpg": (800, 1200), "small": (267, 400), "xs": (133, 200)}
    for row in table.values():
        for kind in ("avif", "jpg", "small", "xs"):
            assert_no_metadata(settings.images_dir / row["thumb_" + kind])
    assert len(thumbnail_files(settings)) == 4 * len(table)


def test_large_photos_are_scaled_to_1600_on_the_long_edge(tmp_path):
    settings = make_settings(tmp_path)
    settings.photos_dir.mkdir()
    Image.new("RGB", (3200, 2000), (30, 90, 200)).save(settings.photos_dir / "big.jpg", quality=80)
    assert ingest.run_photos(settings).startswith("added 1,")
    row = rows(settings)["big"]
    with Image.open(settings.images_dir / row["thumb_jpg"]) as image:
        assert image.size == (1600, 1000)
    with Image.open(settings.images_dir / row["thumb_avif"]) as image:
        assert image.size == (1600, 1000)
    meta = json.loads(row["metadata"])
    assert meta["camera"] is None and meta["date"] is None and "recipe" not in meta


def test_gps_serials_and_owner_never_reach_the_database(archive):
    text = db_text(archive[0])
    for secret in SECRETS:
        assert secret not in text


def test_rerun_changes_and_deletions(tmp_path):
    settings = make_settings(tmp_path)
    paths = demo_photos.generate(settings.photos_dir, count=4)
    assert ingest.run_photos(settings) == "added 4, updated 0, removed 0, failed 0"
    before = rows(settings)
    assert ingest.run_photos(settings) == "added 0, updated 0, removed 0, failed 0"

    # same bytes rewritten (new mtime): hashed, found unchanged
    paths[0].write_bytes(paths[0].read_bytes())
    assert ingest.run_photos(settings) == "added 0, updated 0, removed 0, failed 0"

    long_ago = time.time() - 2 * ingest.SUPERSEDED_GRACE_S  # thumbnails published long before their replacement
    for name in thumbnail_files(settings):
        os.utime(settings.images_dir / name, (long_ago, long_ago))
    # a new picture under an old name: updated, old thumbnails kept a while, upload date kept
    paths[1].write_bytes(demo_photos.make_jpeg(demo_photos.DEMOS[1], 99))
    # a sidecar caption added to a photo without an embedded one is picked up
    bare = demo_photos.DEMOS[21]
    (settings.photos_dir / f"{bare.stem}.jpg").write_bytes(demo_photos.make_jpeg(bare, 21))
    (settings.photos_dir / f"{bare.stem}.txt").write_text("Tram depot at dusk\n")
    # a deleted original leaves the archive
    paths[2].unlink()
    assert ingest.run_photos(settings) == "added 1, updated 1, removed 1, failed 0"
    after = rows(settings)
    assert paths[2].stem not in after and after[bare.stem]["alt"] == "Tram depot at dusk"
    assert after[paths[1].stem]["thumb_jpg"] != before[paths[1].stem]["thumb_jpg"]
    assert after[paths[1].stem]["uploaded"] == before[paths[1].stem]["uploaded"]
    referenced = {row["thumb_" + k] for row in after.values() for k in ("avif", "jpg", "small", "xs")}
    # the replaced photo's old thumbnails outlive the cached replies that name them; the removed one's go
    replaced = {before[paths[1].stem]["thumb_" + k] for k in ("avif", "jpg", "small", "xs")}
    assert thumbnail_files(settings) == referenced | replaced
    assert public_copies(settings) == {row["file_name"] for row in after.values()}
    assert ingest.run_photos(settings) == "added 0, updated 0, removed 0, failed 0"
    assert thumbnail_files(settings) == referenced | replaced
    for name in replaced:  # as they look once the grace has passed
        past = time.time() - ingest.SUPERSEDED_GRACE_S - 1
        os.utime(settings.images_dir / name, (past, past))
    assert ingest.run_photos(settings) == "added 0, updated 0, removed 0, failed 0"
    assert thumbnail_files(settings) == referenced


def test_thumbnails_that_go_missing_are_made_again(tmp_path):
    """A thumbnail deleted, or an images_dir lost (moved, emptied, not in the backup), is made again
    by the next run, byte for byte, leaving the photo's row, and its public copy where that is
    still there, as they were; the manifest never names a file that is not there."""
    settings = make_settings(tmp_path)
    paths = demo_photos.generate(settings.photos_dir, count=3)
    ingest.run_photos(settings)
    before, files = rows(settings), {name: (settings.images_dir / name).read_bytes() for name in thumbnail_files(settings)}
    copy = settings.images_dir / "full" / paths[0].name
    copy_stat = copy.stat()
    lost = before[paths[0].stem]["thumb_small"]
    (settings.images_dir / lost).unlink()
    assert ingest.run_photos(settings) == ("added 0, updated 0, removed 0, failed 0; "
                                           f"made the missing thumbnails of 1 again: {paths[0].stem}")
    assert (settings.images_dir / lost).read_bytes() == files[lost]
    assert (copy.stat().st_ino, copy.stat().st_mtime_ns) == (copy_stat.st_ino, copy_stat.st_mtime_ns)  # not rewritten
    shutil.rmtree(settings.images_dir)
    for path in paths:  # restored with new times (review23b #5): the same bytes, so the same rows
        os.utime(path, (time.time() + 5, time.time() + 5))
    assert ingest.run_photos(settings).startswith("added 0, updated 0, removed 0, failed 0; "
                                                  "made the missing thumbnails of 3 again: ")
    after = rows(settings)
    assert all(after[stem]["stat_key"] != row["stat_key"] for stem, row in before.items())  # the new times kept
    before = {stem: {**row, "stat_key": after[stem]["stat_key"]} for stem, row in before.items()}
    assert {name: (settings.images_dir / name).read_bytes() for name in thumbnail_files(settings)} == files
    assert rows(settings) == before
    assert public_copies(settings) == {row["file_name"] for row in before.values()}
    assert ingest.run_photos(settings) == "added 0, updated 0, removed 0, failed 0"


def caption_vectors(settings) -> tuple[dict[str, tuple[str, bytes]], int]:
    """sha256 → (model, vector bytes), and the index generation."""
    conn = db.connect(settings.db_path, readonly=True)
    try:
        stored = {row["sha256"]: (row["model"], row["vector"]) for row in conn.execute("SELECT * FROM photo_vectors")}
        return stored, conn.execute("SELECT generation FROM photos_state").fetchone()[0]
    finally:
        conn.close()


def test_caption_vectors_follow_the_photos_and_need_the_model(tmp_path):
    no_model = make_settings(tmp_path, sections={**load_settings().sections,
                                                 "ask": {"model_path": str(tmp_path / "absent.onnx")}})
    paths = demo_photos.generate(no_model.photos_dir, count=4)
    assert ingest.run_photos(no_model) == "added 4, updated 0, removed 0, failed 0"
    stored, first = caption_vectors(no_model)
    assert stored == {}

    # the model is back: kept photos get their vectors without being re-ingested
    settings = make_settings(tmp_path)
    assert ingest.run_photos(settings) == "added 0, updated 0, removed 0, failed 0"
    stored, generation = caption_vectors(settings)
    table = rows(settings)
    assert generation != first and set(stored) == {row["sha256"] for row in table.values() if row["alt"]}
    assert len(stored) == 4
    model = ranker.model_for(settings)
    for row in table.values():
        name, blob = stored[row["sha256"]]
        vector = np.frombuffer(blob, dtype=np.float32)
        assert name == ranker.MODEL_NAME and vector.shape == (ranker.DIM,)
        assert np.allclose(vector, model.embed([row["alt"]])[0], atol=1e-5)  # the caption as written

    # unchanged photos cost nothing and leave the index alone
    paths[0].write_bytes(paths[0].read_bytes())
    assert ingest.run_photos(settings) == "added 0, updated 0, removed 0, failed 0"
    assert caption_vectors(settings) == (stored, generation)

    # a changed photo is embedded under its new hash; a deleted one takes its vector along
    paths[1].write_bytes(demo_photos.make_jpeg(demo_photos.DEMOS[1], 99))
    paths[2].unlink()
    assert ingest.run_photos(settings) == "added 0, updated 1, removed 1, failed 0"
    after, changed = caption_vectors(settings)
    table_after = rows(settings)
    assert set(after) == {row["sha256"] for row in table_after.values()} and len(after) == 3
    assert table[paths[1].stem]["sha256"] not in after and table[paths[2].stem]["sha256"] not in after
    assert changed not in (first, generation)

    # a rewritten photo ingested without the model keeps no stale vector
    paths[3].write_bytes(demo_photos.make_jpeg(demo_photos.DEMOS[3], 98))
    assert ingest.run_photos(no_model) == "added 0, updated 1, removed 0, failed 0"
    without, _ = caption_vectors(no_model)
    assert set(without) == {row["sha256"] for stem, row in rows(settings).items() if stem != paths[3].stem}


def test_bad_files_are_reported_by_name_and_skipped(tmp_path, caplog):
    settings = make_settings(tmp_path)
    paths = demo_photos.generate(settings.photos_dir, count=2)
    folder = settings.photos_dir
    (folder / "empty.jpg").write_bytes(b"")
    (folder / "cut.jpg").write_bytes(paths[0].read_bytes()[: len(paths[0].read_bytes()) // 2])
    Image.new("RGB", (50, 50)).save(folder / "actually-png.jpg", "PNG")
    Image.new("RGB", (50, 50)).save(folder / "scan.png", "PNG")
    (folder / ".DS_Store").write_bytes(b"\0\0")
    with caplog.at_level("WARNING"):
        summary = ingest.run_photos(settings)
    assert summary.startswith("added 2, updated 0, removed 0, failed 3 (")
    for name in ("empty.jpg: empty file", "cut.jpg: cannot decode", "actually-png.jpg: not a JPEG"):
        assert name in summary
    assert summary.endswith("skipped 1 non-JPEG: scan.png")
    assert "scan.png" in caplog.text and ".DS_Store" not in caplog.text
    assert set(rows(settings)) == {p.stem for p in paths}
    assert len(thumbnail_files(settings)) == 8  # nothing left behind by the failures
    assert public_copies(settings) == {p.name for p in paths}


def test_missing_folder_raises_instead_of_emptying_the_archive(tmp_path):
    settings = make_settings(tmp_path)
    demo_photos.generate(settings.photos_dir, count=1)
    ingest.run_photos(settings)
    shutil.rmtree(settings.photos_dir)
    with pytest.raises(RuntimeError, match="does not exist"):
        ingest.run_photos(settings)
    assert len(rows(settings)) == 1


def test_demo_generator_is_deterministic(tmp_path):
    first = demo_photos.generate(tmp_path / "a", count=3)
    second = demo_photos.generate(tmp_path / "b", count=3)
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
    more = demo_photos.generate(tmp_path / "c", count=len(demo_photos.DEMOS) + 2)
    assert len({p.stem for p in more}) == len(demo_photos.DEMOS) + 2


def test_demo_generator_command_line(tmp_path, capsys):
    assert demo_photos.main([str(tmp_path / "x"), "2"]) == 0
    assert "wrote 2 demo photos" in capsys.readouterr().out
    assert demo_photos.main([]) == 2
    assert "usage:" in capsys.readouterr().err
    assert demo_photos.main([str(tmp_path), "many"]) == 2


def test_manifest_lists_exactly_the_published_photos(archive):
    settings, _, table = archive
    conn = db.connect(settings.db_path, readonly=True)
    try:
        body = photos.manifest(conn, settings)
        private = photos.manifest(conn, dataclasses.replace(settings, originals_public=False))
    finally:
        conn.close()
    assert body["_address"] == settings.url("/images/manifest.json")
    assert body["count"] == len(table) == len(body["photos"])
    assert {p["stem"] for p in body["photos"]} == set(table)
    first = body["photos"][0]
    assert first["stem"] == "DSCF0125"  # newest first
    assert first["full"] == settings.url("/images/full/DSCF0125.jpg")
    assert first["thumb_small"] == settings.url("/images/" + table["DSCF0125"]["thumb_small"])
    assert first["size"] == (settings.photos_dir / "DSCF0125.jpg").stat().st_size
    assert first["uploaded"] == table["DSCF0125"]["uploaded"]
    assert all(p["full"] is None for p in private["photos"])


@pytest.fixture(scope="module")
def real_archive(tmp_path_factory):
    if not REAL_PHOTOS.is_dir() or not list(REAL_PHOTOS.glob("*.jpg")):
        pytest.skip("the shared real camera files (../shared/data/photos) are not here")
    tmp = tmp_path_factory.mktemp("real")
    settings = make_settings(tmp)
    settings.photos_dir.mkdir()
    for path in REAL_PHOTOS.glob("*.jpg"):
        shutil.copy(path, settings.photos_dir / path.name)
    summary = ingest.run_photos(settings)
    return settings, summary, {stem: json.loads(row["metadata"]) for stem, row in rows(settings).items()}


def _real(real_archive, prefix):
    return next(meta for stem, meta in real_archive[2].items() if stem.startswith(prefix))


def test_real_x100vi_classic_negative(real_archive):
    meta = _real(real_archive, "X100VI_ClassicNeg")
    card = meta["recipe"]
    assert card["Film Simulation"] == "Classic Negative" and card["Grain Effect"] == "Strong / Small"
    assert (card["Color Chrome Effect"], card["Color Chrome FX Blue"]) == ("Strong", "Off")
    assert card["White Balance"] == "4700K, R+4 / B-2" and card["Dynamic Range"] == "DR200"
    assert (card["Highlight"], card["Shadow"], card["Color"], card["High ISO NR"]) == ("-2", "0", "+4", "-4")
    assert meta["lens"] is None and meta["camera"] == "FUJIFILM X100VI"


def test_real_x100vi_classic_chrome(real_archive):
    meta = _real(real_archive, "X100VI_ClassicChrome")
    card = meta["recipe"]
    assert card["Film Simulation"] == "Classic Chrome" and card["Grain Effect"] == "Weak / Large"
    assert card["Color Chrome Effect"] == "Strong" and card["White Balance"] == "5600K, R+1 / B+1"
    assert card["Clarity"] == "+2" and meta["clarity"] == 2


def test_real_xe2s_velvia_records_nothing_newer(real_archive):
    meta = _real(real_archive, "X-E2S-FS-Velvia")
    assert meta["film"] == "Velvia" and meta["recipe"]["Film Simulation"] == "Velvia"
    for key in ("grain", "grain_size", "chrome", "chrome_blue", "clarity"):
        assert meta[key] is None


def test_real_xe2s_monochrome_from_saturation_tag(real_archive):
    meta = _real(real_archive, "X-E2S-FS-MONOCHROME")
    assert meta["film"] == "Monochrome+Ye" and meta["recipe"]["Film Simulation"] == "Monochrome+Ye"


def test_real_files_leak_no_gps_serials_or_owner(real_archive):
    settings, summary, _ = real_archive
    assert summary == "added 4, updated 0, removed 0, failed 0"
    text = db_text(settings)
    for secret in REAL_SECRETS + ("GPS", "Latitude"):
        assert secret not in text
    for name in thumbnail_files(settings):
        assert_no_metadata(settings.images_dir / name)
    for path in settings.photos_dir.iterdir():
        assert_public_copy(path.read_bytes(), (settings.images_dir / "full" / path.name).read_bytes())


# ---------------------------------------------------------------------------------------------
# public copies of the originals, orientation, dates, folders that must not empty the archive


# The §2.4 fields read from standard EXIF tags, which a public copy keeps.
STANDARD_FIELDS = ("camera", "lens", "aperture", "shutter", "iso", "focal", "ev", "date", "width", "height",
                   "color_space", "flash", "exposure_mode", "meter")


def segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + payload


def with_maker_extras(jpeg: bytes) -> bytes:
    """A JPEG as some cameras write it: maker APP segments, a comment and a preview image after
    the end marker, each naming the body's serial or the owner."""
    return (jpeg[:2] + segment(0xE5, b"MAKER\0" + demo_photos.BODY_SERIAL.encode())
            + segment(0xE2, b"FPXR\0" + demo_photos.BODY_SERIAL.encode())
            + segment(0xFE, demo_photos.OWNER.encode()) + jpeg[2:]
            + b"\xff\xd8\xff\xfe\x00\x12" + demo_photos.BODY_SERIAL.encode() + b"\xff\xd9")


def pixels(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image)


def assert_public_copy(original: bytes, copy: bytes, secrets=SECRETS + REAL_SECRETS):
    """Same pixels from the same coded image data; of the metadata only the allowlist."""
    assert np.array_equal(pixels(copy), pixels(original))
    assert copy[copy.rindex(b"\xff\xda"):] in original  # the last scan and the end marker, byte for byte
    assert copy.endswith(b"\xff\xd9")
    image = exiv2.ImageFactory.open(copy)
    image.readMetadata()
    pointers = {"Exif.Image.ExifTag", "Exif.Photo.InteroperabilityTag"}  # exiv2 writes the IFD links
    assert {datum.key() for datum in image.exifData()} - pointers <= exif.PUBLIC_EXIF
    assert image.iptcData().count() == 0 and image.xmpData().count() == 0 and image.comment() == ""
    for secret in secrets:
        assert secret.encode() not in copy, secret


def test_public_copies_keep_the_image_and_drop_private_metadata(archive):
    settings, _, table = archive
    assert public_copies(settings) == {row["file_name"] for row in table.values()}
    for row in table.values():
        original = (settings.photos_dir / row["file_name"]).read_bytes()
        copy = (settings.images_dir / "full" / row["file_name"]).read_bytes()
        assert demo_photos.BODY_SERIAL.encode() in original and b"Demo Owner" in original
        assert_public_copy(original, copy)
        published, kept = json.loads(row["metadata"]), exif.read_metadata(copy).metadata
        for key in STANDARD_FIELDS:
            assert kept[key] == published[key], (row["stem"], key)


def test_public_copies_drop_maker_segments_and_trailing_previews(tmp_path):
    settings = make_settings(tmp_path)
    settings.photos_dir.mkdir()
    # lcms stamps a profile with the second it was made, so it is made once
    srgb_profile = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 40, 40)).save(buffer, "JPEG", icc_profile=srgb_profile, quality=90)
    original = with_maker_extras(demo_photos.make_jpeg(demo_photos.DEMOS[0], 0))
    (settings.photos_dir / "maker.jpg").write_bytes(original)
    (settings.photos_dir / "profiled.jpg").write_bytes(with_maker_extras(buffer.getvalue()))
    assert ingest.run_photos(settings) == "added 2, updated 0, removed 0, failed 0"
    assert_public_copy(original, (settings.images_dir / "full" / "maker.jpg").read_bytes())
    profiled = (settings.images_dir / "full" / "profiled.jpg").read_bytes()
    assert_public_copy((settings.photos_dir / "profiled.jpg").read_bytes(), profiled)
    with Image.open(io.BytesIO(profiled)) as image:
        assert image.info["icc_profile"] == srgb_profile  # the colour profile stays


def test_public_copies_follow_originals_public_and_the_photos(tmp_path):
    settings = make_settings(tmp_path)
    paths = demo_photos.generate(settings.photos_dir, count=3)
    hidden = dataclasses.replace(settings, originals_public=False)
    assert ingest.run_photos(hidden) == "added 3, updated 0, removed 0, failed 0"
    assert public_copies(settings) == set()
    # published later: kept photos get their copies without being re-ingested
    assert ingest.run_photos(settings) == "added 0, updated 0, removed 0, failed 0"
    assert public_copies(settings) == {p.name for p in paths}
    # a changed photo's copy is the new picture; a deleted photo's copy goes; a lost copy comes back
    paths[0].write_bytes(demo_photos.make_jpeg(demo_photos.DEMOS[0], 99))
    paths[1].unlink()
    (settings.images_dir / "full" / paths[2].name).unlink()
    assert ingest.run_photos(settings) == "added 0, updated 1, removed 1, failed 0"
    assert public_copies(settings) == {paths[0].name, paths[2].name}
    assert_public_copy(paths[0].read_bytes(), (settings.images_dir / "full" / paths[0].name).read_bytes())
    assert not list((settings.images_dir / "full").glob(".*"))  # no staged file left behind
    # no longer published: every copy goes, the archive stays
    assert ingest.run_photos(hidden) == "added 0, updated 0, removed 0, failed 0"
    assert public_copies(settings) == set() and len(rows(settings)) == 2


def test_an_empty_folder_keeps_the_archive_until_emptiness_is_meant(tmp_path):
    settings = make_settings(tmp_path)
    paths = demo_photos.generate(settings.photos_dir, count=2)
    ingest.run_photos(settings)
    before = (rows(settings), thumbnail_files(settings), public_copies(settings))
    for path in paths:
        path.unlink()  # as a mount point looks with its drive not mounted
    (settings.photos_dir / "notes.md").write_text("not a photo\n")
    ok, error = jobs.run_job(settings, "photos")
    assert not ok and error.startswith(f"The photos folder {settings.photos_dir} holds no .jpg or .jpeg file "
                                       "while the archive has 2 photos, so nothing was changed")
    assert ingest.EMPTY_MARKER in error
    assert (rows(settings), thumbnail_files(settings), public_copies(settings)) == before
    (settings.photos_dir / ingest.EMPTY_MARKER).touch()
    assert ingest.run_photos(settings).startswith("added 0, updated 0, removed 2, failed 0")
    assert rows(settings) == {} and thumbnail_files(settings) == set() and public_copies(settings) == set()


def test_a_file_name_that_is_not_utf8_is_reported_and_the_rest_ingested(tmp_path):
    settings = make_settings(tmp_path)
    settings.photos_dir.mkdir()
    data = demo_photos.make_jpeg(demo_photos.DEMOS[0], 0)
    (settings.photos_dir / "good.jpg").write_bytes(data)
    (settings.photos_dir / os.fsdecode(b"caf\xe9.jpg")).write_bytes(data)
    (settings.photos_dir / os.fsdecode(b"caf\xe9.png")).write_bytes(b"\x89PNG")
    ok, summary = jobs.run_job(settings, "photos")
    assert ok, summary
    assert summary.startswith("added 1, updated 0, removed 0, failed 1 "
                              "(caf\\xe9.jpg: the file name is not valid UTF-8 (rename the file)); "
                              "skipped 1 non-JPEG: caf\\xe9.png")
    assert set(rows(settings)) == {"good"} and public_copies(settings) == {"good.jpg"}


def landscape_pixels(**save) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (1200, 800), (20, 120, 60)).save(buffer, "JPEG", quality=85, **save)
    return buffer.getvalue()


def test_width_height_and_words_are_those_of_the_displayed_photo(tmp_path):
    """A portrait frame as cameras store it: landscape pixels and an Orientation that turns them."""
    settings = make_settings(tmp_path)
    settings.photos_dir.mkdir()
    for orientation in range(1, 9):
        tags = Image.Exif()
        tags[0x0112] = orientation
        (settings.photos_dir / f"o{orientation}.jpg").write_bytes(landscape_pixels(exif=tags.tobytes()))
    xmp = (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
           b'<rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:Orientation="8"/></rdf:RDF></x:xmpmeta>')
    (settings.photos_dir / "xmp8.jpg").write_bytes(landscape_pixels(xmp=xmp))
    assert ingest.run_photos(settings) == "added 9, updated 0, removed 0, failed 0"
    table = rows(settings)
    for stem, row in table.items():
        meta = json.loads(row["metadata"])
        turned = stem == "xmp8" or int(stem[1:]) >= 5
        assert (meta["width"], meta["height"]) == ((800, 1200) if turned else (1200, 800)), stem
        assert ("portrait" if turned else "landscape") in row["expansion"].split(), stem
        with Image.open(settings.images_dir / row["thumb_jpg"]) as thumb:
            assert thumb.size == (meta["width"], meta["height"]), stem
    # XMP goes from the public copy, so the turn it asked for is written as EXIF
    with Image.open(settings.images_dir / "full" / "xmp8.jpg") as copy:
        assert copy.getexif()[0x0112] == 8 and "xmp" not in copy.info
    assert not exif.EXTRACTOR_VERSION.endswith("rules 1")  # rows measured unturned are read again


@pytest.mark.parametrize("written", ["0000:00:00 00:00:00", "2024:13:45 99:99:99", "2023:02:29 10:00:00",
                                     "    :  :     :  :  "])
def test_dates_that_are_no_real_date_are_null(tmp_path, written):
    settings = make_settings(tmp_path)
    settings.photos_dir.mkdir()
    tags = Image.Exif()
    tags[0x8769] = {0x9003: written}  # DateTimeOriginal
    (settings.photos_dir / "clock.jpg").write_bytes(landscape_pixels(exif=tags.tobytes()))
    ingest.run_photos(settings)
    row = rows(settings)["clock"]
    assert json.loads(row["metadata"])["date"] is None
    assert (row["date"], row["taken"], row["year"]) == (None, None, None)
    assert row["expansion"] == "landscape"  # no month, season or time of day


def tagged(tags: dict[str, str], raw: dict[bytes, bytes] | None = None, **save) -> bytes:
    """A small JPEG with these EXIF tags written by exiv2; `raw` then swaps bytes in the file (text
    that is not UTF-8, which exiv2 will not write itself)."""
    image = exiv2.ImageFactory.open(landscape_pixels(**save))
    image.readMetadata()
    for key, value in tags.items():
        image.exifData()[key] = value
    image.writeMetadata()
    data = bytes(image.io().mmap())
    for old, new in (raw or {}).items():
        assert len(old) == len(new) and data.count(old) == 1
        data = data.replace(old, new)
    return data


def test_text_that_is_not_utf8_is_read_as_windows_1252_and_fails_nothing(tmp_path):
    """A Latin-1 caption or make from an older tool had failed every run: nothing added or removed."""
    settings = make_settings(tmp_path)
    paths = demo_photos.generate(settings.photos_dir, count=2)
    ingest.run_photos(settings)
    (settings.photos_dir / "cafe.jpg").write_bytes(tagged(
        {"Exif.Image.ImageDescription": "Cafe! in Zurich, naive", "Exif.Image.Make": "MAKERX", "Exif.Image.Model": "X-TXX"},
        {b"Cafe!": b"Caf\xe9!", b"naive": "naïv".encode(), b"X-TXX": b"X-T\xff\x81"}))
    paths[0].unlink()  # unpublished by the owner in the same run
    ok, summary = jobs.run_job(settings, "photos")
    assert ok and summary.startswith("added 1, updated 0, removed 1, failed 0"), summary
    row = rows(settings)["cafe"]
    # the stray byte as windows-1252, the UTF-8 beside it as UTF-8
    assert row["alt"] == "Café! in Zurich, naïv" and row["camera"] == "MAKERX X-Tÿ\ufffd"
    assert set(rows(settings)) == {"cafe", paths[1].stem} and paths[0].name not in public_copies(settings)


def test_a_jpeg_with_a_preview_index_is_a_photo_and_its_copy_drops_the_preview(tmp_path):
    """Cameras add a large preview with an MPF index (CIPA DC-007); Pillow names such a file MPO."""
    settings = make_settings(tmp_path)
    settings.photos_dir.mkdir()
    original = demo_photos.make_jpeg(demo_photos.DEMOS[0], 0)
    with Image.open(io.BytesIO(original)) as source:
        preview = source.copy()
        preview.thumbnail((320, 320))
        buffer = io.BytesIO()
        source.save(buffer, "MPO", save_all=True, append_images=[preview], exif=source.info["exif"], quality=90)
    (settings.photos_dir / "mpo.jpg").write_bytes(buffer.getvalue())
    with Image.open(settings.photos_dir / "mpo.jpg") as check:
        assert check.format == "MPO" and check.n_frames == 2
    assert ingest.run_photos(settings) == "added 1, updated 0, removed 0, failed 0"
    assert json.loads(rows(settings)["mpo"]["metadata"])["film"] == "Classic Negative"  # the MakerNote is read
    copy = (settings.images_dir / "full" / "mpo.jpg").read_bytes()
    assert_public_copy(buffer.getvalue(), copy)
    assert copy.count(b"\xff\xd8") == 1 and b"MPF\0" not in copy


def test_a_second_exif_segment_never_reaches_the_public_copy(tmp_path):
    settings = make_settings(tmp_path)
    settings.photos_dir.mkdir()
    original = demo_photos.make_jpeg(demo_photos.DEMOS[0], 0)
    app1 = original.index(b"\xff\xe1")
    first = original[app1:app1 + 2 + int.from_bytes(original[app1 + 2:app1 + 4], "big")]
    assert first[4:10] == b"Exif\0\0" and demo_photos.BODY_SERIAL.encode() in first
    doubled = original[:app1] + first + first + original[app1 + len(first):]  # an editor appended its own
    (settings.photos_dir / "twice.jpg").write_bytes(doubled)
    assert ingest.run_photos(settings) == "added 1, updated 0, removed 0, failed 0"
    copy = (settings.images_dir / "full" / "twice.jpg").read_bytes()
    assert_public_copy(doubled, copy)
    assert copy.count(b"Exif\0\0") == 1


def test_exif_without_a_public_tag_leaves_none_in_the_copy_however_many_segments(tmp_path):
    """exiv2 writes no EXIF segment when no public tag is left, so a second segment became the first."""
    settings = make_settings(tmp_path)
    settings.photos_dir.mkdir()
    original = tagged({"Exif.Image.Artist": demo_photos.OWNER, **demo_photos.GPS})
    app1 = original.index(b"\xff\xe1")
    first = original[app1:app1 + 2 + int.from_bytes(original[app1 + 2:app1 + 4], "big")]
    assert first[4:10] == b"Exif\0\0"
    doubled = original[:app1] + first + first + original[app1 + len(first):]
    (settings.photos_dir / "private.jpg").write_bytes(doubled)
    assert ingest.run_photos(settings) == "added 1, updated 0, removed 0, failed 0"
    copy = (settings.images_dir / "full" / "private.jpg").read_bytes()
    assert_public_copy(doubled, copy)
    assert b"Exif\0\0" not in copy


def test_only_files_named_as_thumbnails_are_ever_swept_from_images_dir(tmp_path):
    settings = make_settings(tmp_path)
    demo_photos.generate(settings.photos_dir, count=1)
    settings.images_dir.mkdir()
    owners = ["DSCF0001.jpg", "notes.txt", "old.0123456789.png"]
    for name in owners:
        (settings.images_dir / name).write_bytes(b"the owner's")
        os.utime(settings.images_dir / name, (time.time() - 7200,) * 2)
    assert ingest.run_photos(settings).startswith("added 1,")
    assert set(owners) <= thumbnail_files(settings)


def test_a_newcomer_with_a_published_photos_name_fails_and_the_photo_stays(tmp_path):
    settings = make_settings(tmp_path)
    settings.photos_dir.mkdir()
    (settings.photos_dir / "dup.jpg").write_bytes(landscape_pixels())
    ingest.run_photos(settings)
    (settings.photos_dir / "dup.JPG").write_bytes(tagged({"Exif.Image.ImageDescription": "the newcomer"}))
    assert ingest.run_photos(settings) == ("added 0, updated 0, removed 0, failed 1 "
                                           "(dup.JPG: another file already has the name dup)")
    assert rows(settings)["dup"]["file_name"] == "dup.jpg" and public_copies(settings) == {"dup.jpg"}


def test_a_copy_is_dated_when_written_so_an_older_replacement_is_newer_to_caches(tmp_path):
    settings = make_settings(tmp_path)
    paths = demo_photos.generate(settings.photos_dir, count=1)
    ingest.run_photos(settings)
    copy = settings.images_dir / "full" / paths[0].name
    before = copy.stat().st_mtime_ns
    paths[0].write_bytes(demo_photos.make_jpeg(demo_photos.DEMOS[0], 7))
    os.utime(paths[0], (1735689600, 1735689600))  # restored from a backup that keeps 2025-01-01
    assert ingest.run_photos(settings).startswith("added 0, updated 1,")
    assert copy.stat().st_mtime_ns >= before
    assert_public_copy(paths[0].read_bytes(), copy.read_bytes())
    # an unchanged photo's copy is left as it is
    assert ingest.run_photos(settings).startswith("added 0, updated 0,") and copy.stat().st_mtime_ns >= before


def test_raw_files_and_subfolders_are_counted_and_a_few_named(tmp_path, caplog):
    settings = make_settings(tmp_path)
    paths = demo_photos.generate(settings.photos_dir, count=1)
    for number in range(8):
        (settings.photos_dir / f"DSCF{number:04}.RAF").write_bytes(b"FUJIFILMCCD-RAW")
    (settings.photos_dir / "2025").mkdir()
    shutil.copy(paths[0], settings.photos_dir / "2025" / "filed.jpg")
    with caplog.at_level("WARNING"):
        summary = ingest.run_photos(settings)
    assert summary == ("added 1, updated 0, removed 0, failed 0; skipped 8 non-JPEG: DSCF0000.RAF, DSCF0001.RAF, "
                       "DSCF0002.RAF, DSCF0003.RAF, DSCF0004.RAF, and 3 more; skipped 1 subfolder "
                       "(only the folder's own files are read): 2025/")
    assert len([r for r in caplog.records if r.message.startswith("skipped")]) == 1


def test_the_capture_date_is_the_digitized_one_before_the_files_own(tmp_path):
    settings = make_settings(tmp_path)
    settings.photos_dir.mkdir()
    (settings.photos_dir / "scan.jpg").write_bytes(tagged({"Exif.Photo.DateTimeDigitized": "2019:05:05 10:00:00",
                                                           "Exif.Image.DateTime": "2024:01:01 09:00:00"}))
    ingest.run_photos(settings)
    row = rows(settings)["scan"]
    assert (row["taken"], row["year"]) == ("2019:05:05 10:00:00", 2019) and "may" in row["expansion"].split()


@pytest.mark.parametrize("description, sidecar, alt", [
    ("SONY DSC", None, None),
    ("OLYMPUS DIGITAL CAMERA", "Harbour at dawn\n", "Harbour at dawn"),  # the sidecar is the caption then
    ("X-T5", None, None),  # only the model
    ("bell\x07 esc\x1b[31m red", None, "bell esc [31m red"),
    (None, "\ufeffSunset over the bay\n", "Sunset over the bay"),  # a sidecar saved by Notepad
])
def test_captions_are_the_photographers_words_on_one_line(tmp_path, description, sidecar, alt):
    settings = make_settings(tmp_path)
    settings.photos_dir.mkdir()
    tags = {"Exif.Image.Make": "FUJIFILM", "Exif.Image.Model": "X-T5"}
    if description:
        tags["Exif.Image.ImageDescription"] = description
    (settings.photos_dir / "c.jpg").write_bytes(tagged(tags))
    if sidecar:
        (settings.photos_dir / "c.txt").write_text(sidecar, encoding="utf-8")
    ingest.run_photos(settings)
    assert rows(settings)["c"]["alt"] == alt
