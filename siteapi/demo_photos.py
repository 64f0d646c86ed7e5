"""The demo photo set: deterministic JPEGs carrying real Fujifilm MakerNote recipes, EXIF and captions.

A fresh clone has no photos, so `generate(folder)` draws simple scenes with Pillow and writes
camera metadata into them with python-exiv2 (the same library the ingest job reads with):
varied bodies and lenses, film simulations (Classic Negative, Reala ACE, Acros+R, monochrome
via the Saturation tag ...), grain, Color Chrome, white-balance shifts, DR, half-step tones,
clarity, captions in XMP / IPTC / EXIF or a sidecar `.txt`, dates across 2023–2026. Every file
also carries GPS, serial numbers and an owner name, which the archive must never publish.
Run as `python -m siteapi.demo_photos FOLDER [COUNT]`.
"""
from __future__ import annotations

import io
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import exiv2
from PIL import Image, ImageDraw

from siteapi import files

OWNER = "Demo Owner"
BODY_SERIAL = "DEMO-SERIAL-0042"
FUJI_SERIAL = "FFDT00424242     DEMOSERIAL"
LENS_SERIAL = "DEMO-LENS-77"
GPS = {  # somewhere on a coastline; must never reach site.db or a thumbnail
    "Exif.GPSInfo.GPSLatitudeRef": "N", "Exif.GPSInfo.GPSLatitude": "37/1 48/1 3012/100",
    "Exif.GPSInfo.GPSLongitudeRef": "W", "Exif.GPSInfo.GPSLongitude": "122/1 25/1 5123/100",
}

# Fujifilm codes (as the bodies write them)
PROVIA, VELVIA, ASTIA, PRO_NEG_HI = 0x000, 0x200, 0x120, 0x501
CLASSIC_CHROME, ETERNA, CLASSIC_NEG, BLEACH_BYPASS, NOSTALGIC, REALA = 0x600, 0x700, 0x800, 0x900, 0xA00, 0xB00
MONOCHROME, MONO_YE, SEPIA, ACROS_R, ACROS_YE, ACROS_G = 0x300, 0x302, 0x310, 0x501, 0x502, 0x503
COLOR = {0: 0x000, 1: 0x080, 2: 0x100, 3: 0x0C0, 4: 0x0E0, -1: 0x180, -2: 0x400, -3: 0x4C0, -4: 0x4E0}
SHARP = {-4: 0, -3: 1, -2: 2, -1: 0x82, 0: 3, 1: 0x84, 2: 4, 3: 5, 4: 6}
NR = {0: 0x000, 1: 0x180, 2: 0x100, 3: 0x1C0, 4: 0x1E0, -1: 0x280, -2: 0x200, -3: 0x2C0, -4: 0x2E0}
STRENGTH = {"Off": 0, "Weak": 32, "Strong": 64}
SIZE = {"Off": 0, "Small": 16, "Large": 32}
WB_AUTO, WB_DAYLIGHT, WB_SHADE, WB_KELVIN = 0x000, 0x100, 0x200, 0xFF0
DEFAULT_COUNT = 24
UNFINISHED = ".demo-set-unfinished"  # a dot name, which the ingest never reads; holds the set's count


@dataclass(frozen=True)
class Demo:
    stem: str
    make: str
    model: str
    lens: str | None
    date: str                      # EXIF form
    caption: str | None
    caption_in: str | None         # "xmp", "iptc", "exif", "sidecar"
    fnumber: str = "28/10"
    exposure: str = "1/250"
    iso: int = 200
    focal: str = "23/1"
    ev: str = "0/1"
    fuji: dict | None = None       # Fujifilm MakerNote settings (see _fuji_tags)
    portrait: bool = False


def _recipe(film, *, mono=None, color=0, grain=("Off", "Off"), chrome="Off", blue="Off", wb=WB_AUTO,
            kelvin=None, shift=(0, 0), dr=(1, 100), highlight=0.0, shadow=0.0, sharp=0, nr=0, clarity=0,
            modern=True):
    return dict(film=film, mono=mono, color=color, grain=grain, chrome=chrome, blue=blue, wb=wb, kelvin=kelvin,
                shift=shift, dr=dr, highlight=highlight, shadow=shadow, sharp=sharp, nr=nr, clarity=clarity,
                modern=modern)


F, X100VI, XT5, XPRO3, XE4, XS20, XT2 = "FUJIFILM", "X100VI", "X-T5", "X-Pro3", "X-E4", "X-S20", "X-T2"
DEMOS = (
    Demo("DSCF0101", F, X100VI, None, "2023:01:14 08:12:03", "Fishing boats moored in the harbour at dawn", "xmp",
         "56/10", "1/500", 320, "23/1", "-1/3",
         _recipe(CLASSIC_NEG, color=4, grain=("Strong", "Small"), chrome="Strong", wb=WB_KELVIN, kelvin=4700,
                 shift=(4, -2), dr=(1, 200), highlight=-2, shadow=0, sharp=-1, nr=-4, clarity=0)),
    Demo("DSCF0102", F, XT5, "XF33mmF1.4 R LM WR", "2023:03:02 17:40:11", "Beach at low tide with a red kite", "iptc",
         "2/1", "1/2000", 125, "33/1", "2/3",
         _recipe(REALA, color=1, grain=("Weak", "Small"), chrome="Weak", blue="Weak", wb=WB_DAYLIGHT,
                 shift=(1, -3), dr=(1, 400), highlight=-1.5, shadow=+0.5, sharp=0, nr=-2, clarity=-2)),
    Demo("DSCF0103", F, XPRO3, "XF23mmF2 R WR", "2023:05:20 21:33:45", "Neon signs on a rainy street at night", "exif",
         "2/1", "1/60", 3200, "23/1", "0/1",
         _recipe(None, mono=ACROS_R, grain=("Strong", "Large"), wb=WB_AUTO, dr=(1, 200), highlight=+1,
                 shadow=+2, sharp=1, nr=-4, clarity=3)),
    Demo("DSCF0104", F, XE4, "XF27mmF2.8 R WR", "2023:07:04 12:05:00", "Cathedral ceiling looking straight up", "sidecar",
         "8/1", "1/125", 400, "27/1", "0/1",
         _recipe(None, mono=ACROS_YE, grain=("Weak", "Small"), dr=(1, 100), highlight=-0.5, shadow=+1.5,
                 sharp=2, nr=0, clarity=2)),
    Demo("DSCF0105", F, XT5, "XF16-80mmF4 R OIS WR", "2023:08:19 06:55:30", "Mountain ridge above the clouds", "xmp",
         "11/1", "1/320", 160, "16/1", "-2/3",
         _recipe(VELVIA, color=2, grain=("Off", "Off"), chrome="Strong", blue="Strong", wb=WB_DAYLIGHT,
                 shift=(0, 0), dr=(1, 400), highlight=-1, shadow=-1, sharp=1, nr=-3, clarity=1)),
    Demo("DSCF0106", F, X100VI, None, "2023:10:28 16:20:14", "Café window with steam on the glass", "iptc",
         "2/1", "1/160", 640, "23/1", "1/3",
         _recipe(CLASSIC_CHROME, color=-1, grain=("Weak", "Large"), chrome="Strong", blue="Off", wb=WB_KELVIN,
                 kelvin=5600, shift=(1, 1), dr=(1, 200), highlight=0, shadow=+1, sharp=0, nr=-4, clarity=2)),
    Demo("DSCF0107", F, XS20, "XF18-55mmF2.8-4 R LM OIS", "2023:12:24 19:02:51", "Christmas market lights and a carousel", "exif",
         "28/10", "1/30", 6400, "18/1", "0/1",
         _recipe(ETERNA, color=-2, grain=("Off", "Off"), chrome="Weak", blue="Weak", wb=WB_AUTO, shift=(2, -4),
                 dr=(0, 200), highlight=-2, shadow=-2, sharp=-2, nr=-1, clarity=-3)),
    Demo("DSCF0108", F, XT5, "XF56mmF1.2 R WR", "2024:02:11 10:15:09", "Portrait of a cellist between rehearsals", "xmp",
         "12/10", "1/1000", 125, "56/1", "1/3",
         _recipe(ASTIA, color=0, grain=("Weak", "Small"), chrome="Off", wb=WB_SHADE, shift=(3, -1), dr=(1, 100),
                 highlight=-0.5, shadow=-0.5, sharp=-1, nr=-2, clarity=-1), portrait=True),
    Demo("DSCF0109", F, X100VI, None, "2024:04:06 18:48:27", "Seagulls over the pier at golden hour", "sidecar",
         "4/1", "1/1000", 250, "23/1", "-1/1",
         _recipe(NOSTALGIC, color=3, grain=("Strong", "Large"), chrome="Strong", blue="Weak", wb=WB_KELVIN,
                 kelvin=6100, shift=(3, -5), dr=(1, 400), highlight=-1.5, shadow=+0.5, sharp=-2, nr=-4,
                 clarity=-2)),
    Demo("DSCF0110", F, XPRO3, "XF35mmF2 R WR", "2024:05:30 14:22:10", "Old tram crossing the bridge", "iptc",
         "56/10", "1/500", 200, "35/1", "0/1",
         _recipe(None, mono=MONOCHROME, grain=("Weak", "Small"), dr=(1, 200), highlight=+2, shadow=+2.5,
                 sharp=3, nr=-4, clarity=4)),
    Demo("DSCF0111", F, XE4, "XF27mmF2.8 R WR", "2024:07:15 13:01:44", "Lemon trees in a courtyard", "exif",
         "4/1", "1/1000", 160, "27/1", "0/1",
         _recipe(PRO_NEG_HI, color=2, grain=("Off", "Off"), chrome="Weak", blue="Strong", wb=WB_DAYLIGHT,
                 shift=(-1, 2), dr=(1, 100), highlight=0, shadow=0, sharp=0, nr=0, clarity=0)),
    Demo("DSCF0112", F, XT5, "XF70-300mmF4-5.6 R LM OIS WR", "2024:09:03 07:30:18", "Heron standing in the marsh", "xmp",
         "56/10", "1/1600", 800, "300/1", "1/3",
         _recipe(CLASSIC_CHROME, color=1, grain=("Weak", "Small"), chrome="Strong", blue="Strong", wb=WB_AUTO,
                 shift=(2, -2), dr=(1, 400), highlight=-1, shadow=+1, sharp=1, nr=-3, clarity=2)),
    Demo("DSCF0113", F, X100VI, None, "2024:10:31 20:15:00", "Pumpkins on the doorstep", "sidecar",
         "2/1", "1/50", 3200, "23/1", "0/1",
         _recipe(BLEACH_BYPASS, color=-3, grain=("Strong", "Small"), chrome="Off", blue="Off", wb=WB_KELVIN,
                 kelvin=3200, shift=(0, 3), dr=(1, 200), highlight=+1.5, shadow=+1, sharp=2, nr=-4, clarity=5)),
    Demo("DSCF0114", F, XS20, "XF10-24mmF4 R OIS WR", "2024:12:08 11:11:11",
         "Frozen lake with skaters, a line of pines behind and the low winter sun throwing long blue shadows "
         "across the ice while a dog chases a tennis ball between the children, who are wrapped in bright "
         "scarves and laughing, and the far shore disappears into mist that hangs above the reeds all morning",
         "xmp", "8/1", "1/500", 200, "10/1", "2/3",
         _recipe(None, mono=SEPIA, grain=("Off", "Off"), dr=(1, 100), highlight=-1, shadow=0, sharp=0, nr=0,
                 clarity=0)),
    Demo("DSCF0115", F, XT2, "XF35mmF1.4 R", "2025:01:19 15:45:33", "Bookshop aisle with a sleeping cat", "iptc",
         "14/10", "1/125", 1600, "35/1", "0/1",
         _recipe(CLASSIC_CHROME, color=0, wb=WB_AUTO, shift=(0, 0), dr=(1, 100), highlight=0, shadow=0,
                 sharp=0, nr=0, modern=False)),
    Demo("DSCF0116", F, XT5, "XF33mmF1.4 R LM WR", "2025:03:14 09:09:26", "Beach huts in a row, painted pastel", "exif",
         "8/1", "1/800", 125, "33/1", "0/1",
         _recipe(REALA, color=2, grain=("Weak", "Large"), chrome="Weak", blue="Off", wb=WB_KELVIN, kelvin=5300,
                 shift=(2, -1), dr=(1, 200), highlight=-0.5, shadow=-1.5, sharp=0, nr=-4, clarity=1)),
    Demo("DSCF0117", F, X100VI, None, "2025:05:01 12:30:00", "Market stall piled with tomatoes", "xmp",
         "4/1", "1/640", 160, "23/1", "1/3",
         _recipe(CLASSIC_NEG, color=3, grain=("Weak", "Small"), chrome="Strong", blue="Weak", wb=WB_DAYLIGHT,
                 shift=(2, -3), dr=(1, 400), highlight=-1, shadow=+1.5, sharp=-1, nr=-4, clarity=-1)),
    Demo("DSCF0118", F, XPRO3, "XF18mmF1.4 R LM WR", "2025:06:21 22:05:12", "Bonfire on the beach at midsummer", "sidecar",
         "14/10", "1/60", 5000, "18/1", "-2/3",
         _recipe(None, mono=ACROS_G, grain=("Strong", "Large"), dr=(0, 400), highlight=+0.5, shadow=+3,
                 sharp=1, nr=-2, clarity=0)),
    Demo("DSCF0119", F, XE4, "XF50mmF2 R WR", "2025:08:09 17:17:17", "Laundry drying between balconies", "iptc",
         "28/10", "1/400", 200, "50/1", "0/1",
         _recipe(PROVIA, color=1, grain=("Off", "Off"), chrome="Off", blue="Off", wb=WB_AUTO, shift=(0, -1),
                 dr=(1, 100), highlight=0, shadow=0, sharp=0, nr=0, clarity=0)),
    Demo("DSCF0120", F, XT5, "XF16-80mmF4 R OIS WR", "2025:10:12 08:40:03", "Vineyard rows in autumn fog", "exif",
         "8/1", "1/250", 400, "40/1", "1/3",
         _recipe(NOSTALGIC, color=2, grain=("Weak", "Small"), chrome="Strong", blue="Off", wb=WB_KELVIN,
                 kelvin=5500, shift=(4, -6), dr=(1, 200), highlight=-1.5, shadow=+1, sharp=-2, nr=-4, clarity=-3)),
    Demo("DSCF0121", F, X100VI, None, "2026:01:03 13:13:13", "Snow on the station platform", "xmp",
         "56/10", "1/500", 320, "23/1", "2/3",
         _recipe(None, mono=MONO_YE, grain=("Strong", "Small"), dr=(1, 400), highlight=-0.5, shadow=+1,
                 sharp=1, nr=-4, clarity=2)),
    Demo("DSCF0122", F, XS20, "XF23mmF1.4 R LM WR", "2026:02:14 19:30:30", None, None,
         "14/10", "1/80", 2500, "23/1", "0/1",
         _recipe(ETERNA, color=-1, grain=("Weak", "Large"), chrome="Weak", blue="Weak", wb=WB_AUTO, shift=(1, -1),
                 dr=(1, 200), highlight=-2, shadow=-1, sharp=-3, nr=-3, clarity=-2)),
    Demo("R0001234", "RICOH IMAGING COMPANY, LTD.", "RICOH GR III", "GR LENS 18.3mm F2.8", "2025:04:18 15:10:08",
         "Shadow of a bicycle on a whitewashed wall", "iptc", "56/10", "1/1000", 200, "183/10", "-1/3"),
    Demo("DSC01234", "SONY", "ILCE-7M4", "FE 24-70mm F2.8 GM II", "2024:06:30 05:48:40",
         "Hot-air balloons rising over the valley", "exif", "8/1", "1/640", 100, "35/1", "0/1"),
    Demo("DSCF0125", F, XT5, "XF33mmF1.4 R LM WR", "2026:03:21 16:02:40", "Kids flying a kite on the dunes", "sidecar",
         "4/1", "1/2000", 125, "33/1", "1/3",
         _recipe(CLASSIC_NEG, color=2, grain=("Strong", "Large"), chrome="Weak", blue="Strong", wb=WB_AUTO,
                 shift=(-2, 4), dr=(1, 400), highlight=-1.5, shadow=-0.5, sharp=0, nr=-2, clarity=3)),
    Demo("DSCF0126", F, XPRO3, "XF23mmF2 R WR", "2023:09:09 09:09:09", "Rowing club boathouse in the morning", "xmp",
         "56/10", "1/320", 250, "23/1", "0/1",
         _recipe(PRO_NEG_HI, color=0, grain=("Off", "Off"), chrome="Off", blue="Off", wb=WB_DAYLIGHT, shift=(0, 0),
                 dr=(1, 100), highlight=+0.5, shadow=-0.5, sharp=0, nr=0, clarity=0)),
)


def _scene(index: int, size: tuple[int, int]) -> Image.Image:
    """A simple, varied landscape: sky gradient, hills, a sun, some shapes (seeded per image)."""
    rng = random.Random(index * 7919 + 17)
    width, height = size
    top = tuple(rng.randrange(40, 220) for _ in range(3))
    bottom = tuple(rng.randrange(20, 250) for _ in range(3))
    mask = Image.linear_gradient("L").resize(size)
    image = Image.composite(Image.new("RGB", size, bottom), Image.new("RGB", size, top), mask)
    draw = ImageDraw.Draw(image)
    radius = rng.randrange(height // 12, height // 5)
    cx, cy = rng.randrange(radius, width - radius), rng.randrange(radius, height // 2)
    draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), fill=tuple(rng.randrange(180, 256) for _ in range(3)))
    for layer in range(3):
        base = height * (0.55 + 0.12 * layer)
        points = [(0, height)] + [(x, base - rng.randrange(0, height // 5)) for x in range(0, width + 100, 100)] + [(width, height)]
        draw.polygon(points, fill=tuple(rng.randrange(10, 160) for _ in range(3)))
    for _ in range(rng.randrange(3, 9)):
        x, y = rng.randrange(0, width), rng.randrange(height // 2, height)
        w, h = rng.randrange(10, 80), rng.randrange(20, 160)
        draw.rectangle((x, y - h, x + w, y), fill=tuple(rng.randrange(0, 256) for _ in range(3)))
    return image


def _fuji_tags(spec: dict) -> dict[str, str]:
    tags = {
        "Exif.Fujifilm.Version": "48 49 51 48",
        "Exif.Fujifilm.SerialNumber": FUJI_SERIAL,
        "Exif.Fujifilm.Quality": "FINE",
        "Exif.Fujifilm.Sharpness": str(SHARP[spec["sharp"]]),
        "Exif.Fujifilm.WhiteBalance": str(spec["wb"]),
        "Exif.Fujifilm.Color": str(spec["mono"] if spec["mono"] is not None else COLOR[spec["color"]]),
        "Exif.Fujifilm.WhiteBalanceFineTune": f"{spec['shift'][0] * 20} {spec['shift'][1] * 20}",
        "Exif.Fujifilm.NoiseReduction": "256",
        "Exif.Fujifilm.HighIsoNoiseReduction": str(NR[spec["nr"]]),
        "Exif.Fujifilm.FocusMode": "0",
        "Exif.Fujifilm.HighlightTone": str(round(-spec["highlight"] * 16)),
        "Exif.Fujifilm.ShadowTone": str(round(-spec["shadow"] * 16)),
        "Exif.Fujifilm.DynamicRange": "1",
        "Exif.Fujifilm.DynamicRangeSetting": str(spec["dr"][0]),
        "Exif.Fujifilm.DevelopmentDynamicRange": str(spec["dr"][1]),
    }
    if spec["kelvin"]:
        tags["Exif.Fujifilm.ColorTemperature"] = str(spec["kelvin"])
    if spec["film"] is not None:
        tags["Exif.Fujifilm.FilmMode"] = str(spec["film"])
    if spec["modern"]:  # bodies before the X-Trans IV generation write none of these
        tags.update({
            "Exif.Fujifilm.Clarity": str(spec["clarity"] * 1000),
            "Exif.Fujifilm.GrainEffectRoughness": str(STRENGTH[spec["grain"][0]]),
            "Exif.Fujifilm.GrainEffectSize": str(SIZE[spec["grain"][1]]),
            "Exif.Fujifilm.ColorChromeEffect": str(STRENGTH[spec["chrome"]]),
            "Exif.Fujifilm.ColorChromeFXBlue": str(STRENGTH[spec["blue"]]),
            "Exif.Fujifilm.DriveSetting": "0",
        })
    return tags


def _variant(demo: Demo, round_: int) -> Demo:
    """Beyond the hand-written set: the same scenes again, a year later each round, new file names."""
    year = 2023 + (int(demo.date[:4]) - 2023 + round_) % 4
    return Demo(**{**demo.__dict__, "stem": f"{demo.stem}_{round_}", "date": f"{year}{demo.date[4:]}"})


def make_jpeg(demo: Demo, index: int) -> bytes:
    """One demo JPEG with its metadata written in."""
    size = (800, 1200) if demo.portrait else (1200, 800)
    buffer = io.BytesIO()
    _scene(index, size).save(buffer, "JPEG", quality=85)
    image = exiv2.ImageFactory.open(buffer.getvalue())
    image.readMetadata()
    exif = image.exifData()
    tags = {
        "Exif.Image.Make": demo.make, "Exif.Image.Model": demo.model, "Exif.Image.Artist": OWNER,
        "Exif.Image.Copyright": f"(c) {OWNER}", "Exif.Image.DateTime": demo.date,
        "Exif.Photo.DateTimeOriginal": demo.date, "Exif.Photo.FNumber": demo.fnumber,
        "Exif.Photo.ExposureTime": demo.exposure, "Exif.Photo.ISOSpeedRatings": str(demo.iso),
        "Exif.Photo.FocalLength": demo.focal, "Exif.Photo.ExposureBiasValue": demo.ev,
        "Exif.Photo.MeteringMode": "5", "Exif.Photo.Flash": "16", "Exif.Photo.ExposureMode": "0",
        "Exif.Photo.WhiteBalance": "0", "Exif.Photo.ColorSpace": "1",
        "Exif.Photo.PixelXDimension": str(size[0]), "Exif.Photo.PixelYDimension": str(size[1]),
        "Exif.Photo.BodySerialNumber": BODY_SERIAL, **GPS,
    }
    if demo.lens:
        tags["Exif.Photo.LensModel"] = demo.lens
        tags["Exif.Photo.LensSerialNumber"] = LENS_SERIAL
    if demo.fuji:
        tags.update(_fuji_tags(demo.fuji))
    for key, value in tags.items():
        exif[key] = value
    if demo.caption and demo.caption_in == "xmp":
        image.xmpData()["Xmp.dc.description"] = f'lang="x-default" {demo.caption}'
    elif demo.caption and demo.caption_in == "iptc":
        image.iptcData()["Iptc.Application2.Caption"] = demo.caption
    elif demo.caption and demo.caption_in == "exif":
        exif["Exif.Image.ImageDescription"] = demo.caption
    image.writeMetadata()
    return bytes(image.io().mmap())


def _put(path: Path, payload: bytes) -> None:
    temp = path.with_name(f".{path.name}.tmp")  # a dot name: the ingest never reads it
    files.write_synced(temp, payload)
    files.replace_synced(temp, path)


def _demos(count: int):
    """The `count` demos of a set, with their index: the hand-written ones, then variants of them."""
    for index in range(count):
        demo = DEMOS[index % len(DEMOS)]
        yield index, (demo if index < len(DEMOS) else _variant(demo, index // len(DEMOS)))


def unfinished(folder: str | Path) -> int | None:
    """The count of a demo set whose generation in `folder` was stopped before its last photo (its
    UNFINISHED mark is still there), or None. Only `generate` leaves the mark: a folder of the
    owner's own photos, however they are named, or a set the owner trimmed, is never added to."""
    try:
        return int((Path(folder) / UNFINISHED).read_text(encoding="ascii"))
    except (OSError, ValueError):
        return None


def generate(folder: str | Path, count: int = DEFAULT_COUNT) -> list[Path]:
    """Write `count` demo JPEGs (and their sidecar captions) into `folder`; returns the JPEG paths.

    Deterministic: the same count gives byte-identical files, so a re-ingest finds nothing changed
    (and completing a set a stopped run left unfinished rewrites its photos as they were). The
    UNFINISHED mark is there from before the first photo until after the last.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    mark = folder / UNFINISHED
    _put(mark, str(count).encode("ascii"))
    paths = []
    for index, demo in _demos(count):
        path = folder / f"{demo.stem}.jpg"
        # Each file whole under its name or not there (a first `make run` stopped midway leaves no
        # half photo for the ingest to refuse); the caption before its photo.
        if demo.caption and demo.caption_in == "sidecar":
            _put(path.with_suffix(".txt"), (demo.caption + "\n").encode("utf-8"))
        _put(path, make_jpeg(demo, index))
        paths.append(path)
    mark.unlink()
    return paths


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2 or (len(argv) == 2 and not argv[1].isdigit()):
        print(f"usage: python -m siteapi.demo_photos FOLDER [COUNT]  (COUNT defaults to {DEFAULT_COUNT})", file=sys.stderr)
        return 2
    paths = generate(argv[0], int(argv[1]) if len(argv) == 2 else DEFAULT_COUNT)
    print(f"wrote {len(paths)} demo photos to {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
