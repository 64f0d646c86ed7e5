"""The photo ingest job: originals folder → public-safe metadata, recipe cards, thumbnails, public
copies of the originals, `photos` rows.

`read_metadata` turns one JPEG's bytes into the §2.4 allowlist (python-exiv2) plus the Fujifilm
recipe card in the names photographers use, with width and height as the photo is displayed
(EXIF Orientation applied) and no date that is not a real calendar date and time;
`make_thumbnails` writes the four content-hashed thumbnails with Pillow, carrying no metadata but
the colour profile; `public_original` is the original with its image data byte for byte and only
PUBLIC_EXIF and the colour profile left of its metadata (what /images/full/ serves).
`run_photos(settings)` is the job: it ingests new and changed files (by content hash), removes
deleted ones, skips and reports what it cannot read (a file name that is not UTF-8 included),
embeds captions with the /ask model (when it can be loaded) for matching by meaning, and writes
everything in one short transaction; the public copies (`images_dir/full/<file name>`, only while
originals_public is true) are staged before it and renamed into place after it, and any copy of a
photo no longer published is removed. A removed photo's thumbnails go with it; a replaced photo's
old ones stay SUPERSEDED_GRACE_S, for the cached replies that still name them. A folder with no
JPEG left while the archive has photos (a drive not mounted) is refused rather than emptying the
archive, unless it holds EMPTY_MARKER.
Nothing outside the allowlist (GPS, serial numbers, owner names) is ever copied.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from pathlib import Path

import exiv2
from PIL import Image, ImageOps
from tqdm import tqdm

from siteapi import db, ranker

log = logging.getLogger(__name__)

# Bump RULES when what read_metadata makes of a file changes (the mapping below, dimensions,
# dates): rows read under other rules are re-read. 2: displayed orientation, real dates only.
RULES = 2
EXTRACTOR = "exiv2"
EXTRACTOR_VERSION = f"libexiv2 {exiv2.version()}; python-exiv2 {exiv2.__version__}; rules {RULES}"

JPEG_SUFFIXES = (".jpg", ".jpeg")
FULL_DIR = "full"  # under images_dir: the public copies of the originals, served as /images/full/
# A folder with no JPEG empties the archive only when this file says the emptiness is meant.
EMPTY_MARKER = ".empty-archive"
ALT_MAX = 240
# A replaced photo's old thumbnails stay this long after the replacement: query replies cached by
# the app, browsers and proxies (up to 10 minutes) still name them. A removed photo's go at once.
SUPERSEDED_GRACE_S = 3600
# Faults of the disk the run writes to, not of a photo: they fail the whole run (a full disk was
# reported as every photo it reached failing, in a run recorded as ok).
OUR_DISK_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
THUMB_SIZES = {"jpg": 1600, "avif": 1600, "small": 400, "xs": 200}
# The EXIF a public copy of an original keeps: the tags the §2.4 metadata is read from, and those
# that show the pixels right (orientation, colour space, resolution). GPS, serial numbers, owner
# and copyright names, the MakerNote and everything else go.
PUBLIC_EXIF = frozenset({
    "Exif.Image.Make", "Exif.Image.Model", "Exif.Image.Orientation", "Exif.Image.DateTime",
    "Exif.Image.XResolution", "Exif.Image.YResolution", "Exif.Image.ResolutionUnit", "Exif.Image.YCbCrPositioning",
    "Exif.Photo.ExifVersion", "Exif.Photo.DateTimeOriginal", "Exif.Photo.ExposureTime", "Exif.Photo.FNumber",
    "Exif.Photo.ISOSpeedRatings", "Exif.Photo.FocalLength", "Exif.Photo.ExposureBiasValue", "Exif.Photo.LensModel",
    "Exif.Photo.ColorSpace", "Exif.Photo.WhiteBalance", "Exif.Photo.Flash", "Exif.Photo.ExposureMode",
    "Exif.Photo.MeteringMode", "Exif.Photo.Sharpness", "Exif.Photo.PixelXDimension", "Exif.Photo.PixelYDimension",
    "Exif.Iop.InteroperabilityIndex", "Exif.Iop.InteroperabilityVersion",
})
# The APPn segments a public copy keeps (marker, signature): JFIF, the rewritten EXIF, the ICC
# profile, Adobe's colour transform. exiv2 leaves maker segments, MPF previews and data after the
# image's end in place, so the copy drops every other APPn and COM segment and all that trails.
KEPT_SEGMENTS = ((0xE0, b"JFIF\0"), (0xE1, b"Exif\0\0"), (0xE2, b"ICC_PROFILE\0"), (0xEE, b"Adobe"))

exiv2.LogMsg.setLevel(exiv2.LogMsg.Level.error)

# Fujifilm MakerNote codes (the values the bodies write), in the names on a recipe card.
FILM_MODES = {
    0x000: "Provia", 0x100: "Studio Portrait", 0x110: "Studio Portrait Enhanced Saturation",
    0x120: "Astia", 0x130: "Studio Portrait Increased Sharpness", 0x200: "Velvia",
    0x300: "Studio Portrait Ex", 0x400: "Velvia", 0x500: "Pro Neg. Std", 0x501: "Pro Neg. Hi",
    0x600: "Classic Chrome", 0x700: "Eterna", 0x800: "Classic Negative",
    0x900: "Eterna Bleach Bypass", 0xA00: "Nostalgic Neg.", 0xB00: "Reala ACE",
}
# The Saturation tag holds the colour setting, or the film for monochrome and sepia modes.
SATURATION = {
    0x000: "0", 0x080: "+1", 0x100: "+2", 0x0C0: "+3", 0x0E0: "+4",
    0x180: "-1", 0x400: "-2", 0x4C0: "-3", 0x4E0: "-4", 0x200: "Low",
}
MONO_FILMS = {
    0x300: "Monochrome", 0x301: "Monochrome+R", 0x302: "Monochrome+Ye", 0x303: "Monochrome+G",
    0x310: "Sepia", 0x500: "Acros", 0x501: "Acros+R", 0x502: "Acros+Ye", 0x503: "Acros+G",
}
SHARPNESS = {0: "-4", 1: "-3", 2: "-2", 0x82: "-1", 3: "0", 0x84: "+1", 4: "+2", 5: "+3", 6: "+4"}
HIGH_ISO_NR = {
    0x000: "0", 0x180: "+1", 0x100: "+2", 0x1C0: "+3", 0x1E0: "+4",
    0x280: "-1", 0x200: "-2", 0x2C0: "-3", 0x2E0: "-4",
}
EFFECT_STRENGTH = {0: "Off", 32: "Weak", 64: "Strong"}
GRAIN_SIZE = {0: "Off", 16: "Small", 32: "Large"}
FUJI_WHITE_BALANCE = {
    0x000: "Auto", 0x001: "Auto (white priority)", 0x002: "Auto (ambience priority)",
    0x100: "Daylight", 0x200: "Shade", 0x300: "Fluorescent 1", 0x301: "Fluorescent 2",
    0x302: "Fluorescent 3", 0x303: "Fluorescent 4", 0x304: "Fluorescent 5", 0x400: "Incandescent",
    0x500: "Flash", 0x600: "Underwater", 0xF00: "Custom", 0xF01: "Custom 2", 0xF02: "Custom 3",
    0xF03: "Custom 4", 0xF04: "Custom 5", 0xFF0: "Kelvin",
}
DR_SETTING_AUTO = 0


class PhotoError(Exception):
    """This file cannot be ingested; the message says why in a few words."""


@dataclass
class Extracted:
    metadata: dict
    alt: str | None


@dataclass
class IngestReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def summary(self) -> str:
        line = (f"added {len(self.added)}, updated {len(self.updated)}, "
                f"removed {len(self.removed)}, failed {len(self.failed)}")
        if self.failed:
            line += " (" + "; ".join(f"{name}: {why}" for name, why in self.failed) + ")"
        if self.skipped:
            line += f"; skipped {len(self.skipped)} non-JPEG: " + ", ".join(self.skipped)
        return line


# ---------------------------------------------------------------------------------------------
# metadata


def _signed(value: float) -> str:
    text = f"{value:+.1f}".rstrip("0").rstrip(".")
    return "0" if text in ("+0", "-0") else text


def _ev_text(ev: float) -> str:
    """Exposure compensation as a card says it: thirds of a stop, e.g. '+2/3', '-1 1/3'."""
    thirds = round(ev * 3)
    if thirds == 0:
        return "0"
    sign, whole, rest = ("+" if thirds > 0 else "-"), abs(thirds) // 3, abs(thirds) % 3
    parts = ([str(whole)] if whole else []) + ([f"{rest}/3"] if rest else [])
    return sign + " ".join(parts)


def _number(value: Fraction) -> str:
    return f"{float(value):.1f}".rstrip("0").rstrip(".")


class _Tags:
    """The first datum for each key of one image's EXIF/IPTC/XMP (lazy accessors)."""

    def __init__(self, image):
        self.exif = image.exifData()
        self.by_key = {}
        for data in (self.exif, image.iptcData(), image.xmpData()):
            for datum in data:
                self.by_key.setdefault(datum.key(), datum)

    def has(self, key: str) -> bool:
        return key in self.by_key

    def int(self, key: str, index: int = 0) -> int | None:
        datum = self.by_key.get(key)
        if datum is None or datum.count() <= index:
            return None
        try:
            return int(datum.toInt64(index))
        except (ValueError, OverflowError, exiv2.Exiv2Error):
            return None

    def ratio(self, key: str) -> Fraction | None:
        datum = self.by_key.get(key)
        if datum is None or datum.count() < 1:
            return None
        num, den = datum.toRational(0)
        return Fraction(num, den) if den else None

    def text(self, key: str) -> str | None:
        datum = self.by_key.get(key)
        if datum is None:
            return None
        if datum.typeName() == "LangAlt":
            value = datum.value()
            try:
                text = value["x-default"]
            except (KeyError, IndexError):
                text = datum.toString(0)
        else:
            text = datum.toString()
        text = text.strip("\x00 \t\r\n")
        return text or None

    def printed(self, key: str) -> str | None:
        datum = self.by_key.get(key)
        if datum is None:
            return None
        text = datum.print(self.exif).strip()
        return text or None


def _clean_caption(text: str | None) -> str | None:
    if not text:
        return None
    text = " ".join(text.split())
    if len(text) <= ALT_MAX:
        return text or None
    cut = text[: ALT_MAX - 1]
    if " " in cut[ALT_MAX // 2:]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,;:.-") + "…"


def _open_jpeg(data: bytes):
    """One JPEG's exiv2 image with its metadata read; raises PhotoError when exiv2 cannot read it."""
    try:
        image = exiv2.ImageFactory.open(data)
        image.readMetadata()
    except exiv2.Exiv2Error as exc:
        raise PhotoError(f"unreadable metadata ({exc.args[-1] if exc.args else exc})") from None
    if image.mimeType() != "image/jpeg":
        raise PhotoError(f"not a JPEG ({image.mimeType()})")
    return image


def _orientation(tags: _Tags) -> int:
    """EXIF Orientation 1-8 (XMP tiff:Orientation when EXIF has none, as Pillow reads it to turn
    the thumbnails upright); 1 when absent or not a valid value."""
    key = "Exif.Image.Orientation" if tags.has("Exif.Image.Orientation") else "Xmp.tiff.Orientation"
    value = tags.int(key)
    return value if value is not None and 1 <= value <= 8 else 1


def _real_date(text: str | None) -> str | None:
    """An EXIF date `YYYY:MM:DD HH:MM:SS` that names a real day and time; None for placeholders
    such as 0000:00:00 00:00:00 and impossible values."""
    if not text or not re.fullmatch(r"\d{4}:\d\d:\d\d \d\d:\d\d:\d\d", text):
        return None
    try:
        datetime.strptime(text, "%Y:%m:%d %H:%M:%S")
    except ValueError:
        return None
    return text


def read_metadata(data: bytes, sidecar: str | None = None) -> Extracted:
    """The §2.4 allowlist and caption of one JPEG; raises PhotoError when exiv2 cannot read it."""
    image = _open_jpeg(data)
    tags = _Tags(image)
    fuji = any(key.startswith("Exif.Fujifilm.") for key in tags.by_key)

    make, model = tags.text("Exif.Image.Make"), tags.text("Exif.Image.Model")
    camera = model
    if make and model and not model.lower().startswith(make.split()[0].lower()):
        camera = f"{make} {model}"
    fnumber, exposure, focal = (tags.ratio("Exif.Photo.FNumber"), tags.ratio("Exif.Photo.ExposureTime"),
                                tags.ratio("Exif.Photo.FocalLength"))
    bias = tags.ratio("Exif.Photo.ExposureBiasValue")
    ev = round(float(bias), 2) if bias is not None else None
    shutter = None
    if exposure:
        shutter = f"1/{round(1 / exposure)}" if exposure < Fraction(1, 3) else f"{_number(exposure)}"
    iso = tags.int("Exif.Photo.ISOSpeedRatings") or tags.int("Exif.Photo.PhotographicSensitivity")

    width, height = image.pixelWidth() or None, image.pixelHeight() or None
    if _orientation(tags) >= 5:  # 5-8 turn the frame a quarter: portrait pixels stored on their side
        width, height = height, width
    meta: dict = {
        "camera": camera,
        "lens": tags.text("Exif.Photo.LensModel"),
        "aperture": f"f/{_number(fnumber)}" if fnumber else None,
        "shutter": shutter,
        "iso": iso,
        "focal": f"{_number(focal)} mm" if focal else None,
        "ev": ev,
        "date": _real_date(tags.text("Exif.Photo.DateTimeOriginal") or tags.text("Exif.Image.DateTime")),
        "width": width,
        "height": height,
        "color_space": tags.printed("Exif.Photo.ColorSpace"),
        "white_balance": tags.printed("Exif.Photo.WhiteBalance"),
        "flash": tags.printed("Exif.Photo.Flash"),
        "exposure_mode": tags.printed("Exif.Photo.ExposureMode"),
        "meter": tags.printed("Exif.Photo.MeteringMode"),
        "sharpness": tags.printed("Exif.Photo.Sharpness"),
    }
    meta.update(_fujifilm(tags) if fuji else dict.fromkeys(
        ("wb_shift", "focus_mode", "drive", "noise_reduction", "color_temp", "clarity", "film", "dr",
         "dr_value", "chrome", "chrome_blue", "grain", "grain_size", "highlight_tone", "shadow_tone",
         "saturation")))
    if fuji:
        recipe = _recipe(meta)
        if recipe:
            meta["recipe"] = recipe

    caption = None
    for key in ("Xmp.dc.description", "Iptc.Application2.Caption", "Exif.Image.ImageDescription"):
        caption = _clean_caption(tags.text(key))
        if caption:
            break
    return Extracted(meta, caption or _clean_caption(sidecar))


def _fujifilm(tags: _Tags) -> dict:
    out: dict = {}
    fuji_wb = tags.int("Exif.Fujifilm.WhiteBalance")
    if fuji_wb is not None:
        out["white_balance"] = FUJI_WHITE_BALANCE.get(fuji_wb, tags.printed("Exif.Fujifilm.WhiteBalance"))
    red, blue = tags.int("Exif.Fujifilm.WhiteBalanceFineTune", 0), tags.int("Exif.Fujifilm.WhiteBalanceFineTune", 1)
    # The tag stores the shift ×20; cards write the camera's steps.
    out["wb_shift"] = (f"R{_signed(red / 20)} / B{_signed(blue / 20)}"
                       if red is not None and blue is not None else None)
    out["color_temp"] = tags.int("Exif.Fujifilm.ColorTemperature") if fuji_wb == 0xFF0 else None
    out["focus_mode"] = tags.printed("Exif.Fujifilm.FocusMode")
    out["drive"] = tags.printed("Exif.Fujifilm.DriveSetting")
    sharp = tags.int("Exif.Fujifilm.Sharpness")
    if sharp is not None and sharp in SHARPNESS:
        out["sharpness"] = SHARPNESS[sharp]
    nr = tags.int("Exif.Fujifilm.HighIsoNoiseReduction")
    out["noise_reduction"] = HIGH_ISO_NR.get(nr) if nr is not None else None
    clarity = tags.int("Exif.Fujifilm.Clarity")
    out["clarity"] = round(clarity / 1000) if clarity is not None else None

    saturation = tags.int("Exif.Fujifilm.Color")
    film_mode = tags.int("Exif.Fujifilm.FilmMode")
    if saturation in MONO_FILMS:
        out["film"], out["saturation"] = MONO_FILMS[saturation], None
    else:
        out["film"] = FILM_MODES.get(film_mode) if film_mode is not None else None
        out["saturation"] = SATURATION.get(saturation) if saturation is not None else None

    dr_setting, dr_value = tags.int("Exif.Fujifilm.DynamicRangeSetting"), tags.int("Exif.Fujifilm.DevelopmentDynamicRange")
    out["dr_value"] = dr_value
    if dr_setting == DR_SETTING_AUTO:
        out["dr"] = "DR-Auto"
    else:
        out["dr"] = f"DR{dr_value}" if dr_value else None

    for name, key, table in (("chrome", "ColorChromeEffect", EFFECT_STRENGTH),
                             ("chrome_blue", "ColorChromeFXBlue", EFFECT_STRENGTH),
                             ("grain", "GrainEffectRoughness", EFFECT_STRENGTH),
                             ("grain_size", "GrainEffectSize", GRAIN_SIZE)):
        raw = tags.int("Exif.Fujifilm." + key)
        out[name] = table.get(raw, str(raw)) if raw is not None else None
    # Tones are stored as -16 per step (+ is darker in the tag): 32 → -2, -24 → +1.5.
    for name, key in (("highlight_tone", "HighlightTone"), ("shadow_tone", "ShadowTone")):
        raw = tags.int("Exif.Fujifilm." + key)
        out[name] = _signed(-raw / 16) if raw is not None else None
    return out


def _recipe(meta: dict) -> dict | None:
    """The frame's recipe card in photographers' names; None when no film simulation was recorded."""
    if not meta.get("film"):
        return None
    white_balance = meta.get("white_balance")
    if white_balance == "Kelvin" and meta.get("color_temp"):
        white_balance = f"{meta['color_temp']}K"
    if white_balance and meta.get("wb_shift"):
        white_balance = f"{white_balance}, {meta['wb_shift']}"
    grain = meta.get("grain")
    if grain and grain != "Off" and meta.get("grain_size") and meta["grain_size"] != "Off":
        grain = f"{grain} / {meta['grain_size']}"
    clarity = meta.get("clarity")
    card = {
        "Film Simulation": meta["film"],
        "Dynamic Range": meta.get("dr"),
        "Grain Effect": grain,
        "Color Chrome Effect": meta.get("chrome"),
        "Color Chrome FX Blue": meta.get("chrome_blue"),
        "White Balance": white_balance,
        "Highlight": meta.get("highlight_tone"),
        "Shadow": meta.get("shadow_tone"),
        "Color": meta.get("saturation"),
        "Sharpness": meta.get("sharpness") if meta.get("sharpness") in SHARPNESS.values() else None,
        "High ISO NR": meta.get("noise_reduction"),
        "Clarity": _signed(clarity) if clarity is not None else None,
        "ISO": str(meta["iso"]) if meta.get("iso") else None,
        "Exposure Compensation": _ev_text(meta["ev"]) if meta.get("ev") is not None else None,
    }
    # A setting the body does not have is left off the card rather than shown as empty.
    return {key: value for key, value in card.items() if value is not None}


def recipe_text(recipe: dict | None) -> str:
    """The card as 'Name: value' lines, the form the `recipe` filter searches."""
    return "\n".join(f"{key}: {value}" for key, value in (recipe or {}).items())


# ---------------------------------------------------------------------------------------------
# thumbnails


def _fit(image: Image.Image, edge: int) -> Image.Image:
    if max(image.size) <= edge:
        return image.copy()
    scale = edge / max(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)


def make_thumbnails(data: bytes, stem: str, out_dir: Path) -> dict[str, str]:
    """Write avif + jpg (1600 px), small (400 px) and xs (200 px) for one JPEG; returns kind → file name.

    Names carry a hash of each file's bytes, so a changed photo never reuses a cached URL.
    Only the colour profile is kept: no EXIF, XMP, GPS or serial numbers reach a thumbnail.
    Raises PhotoError when Pillow cannot decode the image (corrupt or truncated).
    """
    try:
        with Image.open(io.BytesIO(data)) as source:
            if source.format != "JPEG":
                raise PhotoError(f"not a JPEG ({source.format})")
            source.draft("RGB", (THUMB_SIZES["jpg"], THUMB_SIZES["jpg"]))  # DCT-domain downscale
            icc = source.info.get("icc_profile")
            upright = ImageOps.exif_transpose(source).convert("RGB")
    except PhotoError:
        raise
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise PhotoError(f"cannot decode the image ({exc})") from None
    large = _fit(upright, THUMB_SIZES["jpg"])
    encoded = {}
    for kind, image in (("jpg", large), ("avif", large),
                        ("small", _fit(large, THUMB_SIZES["small"])), ("xs", _fit(large, THUMB_SIZES["xs"]))):
        image.info = {}
        buffer = io.BytesIO()
        extra = {"icc_profile": icc} if icc else {}
        if kind == "avif":
            image.save(buffer, "AVIF", quality=60, speed=8, **extra)
        else:
            image.save(buffer, "JPEG", quality=82, optimize=True, progressive=kind == "jpg", **extra)
        encoded[kind] = buffer.getvalue()
    names = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    for kind, payload in encoded.items():
        suffix = {"jpg": "", "avif": "", "small": "-400", "xs": "-200"}[kind]
        ext = "avif" if kind == "avif" else "jpg"
        name = f"{stem}{suffix}.{hashlib.sha256(payload).hexdigest()[:10]}.{ext}"
        target = out_dir / name
        if not target.exists():
            temp = target.with_name(f".{name}.tmp")
            try:
                temp.write_bytes(payload)
                os.replace(temp, target)
            except BaseException:
                temp.unlink(missing_ok=True)  # a write cut short (a full disk) leaves no part of a file
                raise
        names[kind] = name
    return names


# ---------------------------------------------------------------------------------------------
# public copies of the originals


def public_original(data: bytes) -> bytes:
    """The original JPEG for /images/full/: its image data byte for byte (nothing is re-encoded),
    of its metadata only PUBLIC_EXIF and the ICC colour profile; raises PhotoError when exiv2
    cannot rewrite it."""
    image = _open_jpeg(data)
    tags = _Tags(image)
    kept = exiv2.ExifData()
    for datum in image.exifData():
        if datum.key() in PUBLIC_EXIF:
            kept.add(datum)
    orientation = _orientation(tags)
    if orientation != 1 and not tags.has("Exif.Image.Orientation"):  # only XMP said so, and XMP goes
        kept["Exif.Image.Orientation"] = str(orientation)
    try:
        image.setExifData(kept)
        image.clearIptcData()
        image.clearXmpData()
        image.clearXmpPacket()
        image.clearComment()
        image.writeMetadata()
    except exiv2.Exiv2Error as exc:
        raise PhotoError(f"cannot copy the original without its metadata ({exc.args[-1] if exc.args else exc})") from None
    return _kept_segments(bytes(image.io().mmap()))


def _scan_end(data: bytes, start: int) -> int:
    """Where the entropy-coded data that begins at `start` ends: the next marker that is not a
    restart marker (FF00 is an escaped FF byte, FFFF fill before a marker)."""
    at = start
    while (at := data.find(b"\xff", at)) != -1 and at + 1 < len(data):
        follower = data[at + 1]
        if follower == 0x00 or 0xD0 <= follower <= 0xD7:
            at += 2
        elif follower == 0xFF:
            at += 1
        else:
            return at
    return len(data)


def _kept_segments(jpeg: bytes) -> bytes:
    """`jpeg` without the APPn and COM segments KEPT_SEGMENTS does not name and without anything
    after its end-of-image marker; every other segment and the image data unchanged."""
    parts, at = [jpeg[:2]], 2
    while at + 1 < len(jpeg):
        if jpeg[at] != 0xFF:
            raise PhotoError("cannot copy the original (broken JPEG structure)")
        marker = jpeg[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker == 0xD9:  # end of image
            parts.append(jpeg[at:at + 2])
            break
        end = at + 2 + int.from_bytes(jpeg[at + 2:at + 4], "big")
        if marker == 0xDA:  # start of scan: its header, then the entropy-coded data
            end = _scan_end(jpeg, end)
        metadata = 0xE0 <= marker <= 0xEF or marker == 0xFE
        if not metadata or any(marker == kept and jpeg.startswith(signature, at + 4)
                               for kept, signature in KEPT_SEGMENTS):
            parts.append(jpeg[at:end])
        at = end
    return b"".join(parts)


def _stage_copy(full_dir: Path, name: str, payload: bytes, mtime_ns: int) -> Path:
    """Write a public copy to a temporary file beside its final name; run_photos renames it after
    the transaction. It carries the original's modification time, so a copy left behind by a run
    stopped between its commit and its renames is seen to be stale and written again."""
    full_dir.mkdir(parents=True, exist_ok=True)
    temp = full_dir / f".{name}.tmp"
    try:
        temp.write_bytes(payload)
        os.utime(temp, ns=(mtime_ns, mtime_ns))
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp


def _copy_is_current(original: Path, copy: Path) -> bool:
    try:
        return copy.stat().st_mtime_ns == original.stat().st_mtime_ns
    except FileNotFoundError:
        return False


# ---------------------------------------------------------------------------------------------
# the job

PHOTO_COLUMNS = (
    "stem", "file_name", "sha256", "stat_key", "size", "alt", "camera", "lens", "film", "date", "taken",
    "year", "recipe", "recipe_text", "metadata", "thumb_avif", "thumb_jpg", "thumb_small", "thumb_xs",
    "expansion", "extractor", "extractor_version", "uploaded", "updated",
)

MONTHS = ("january february march april may june july august september october november december").split()


def expansion_words(meta: dict) -> str:
    """Words a photographer searches by that the file implies but no field spells out."""
    words = []
    film = (meta.get("film") or "").lower()
    if film.startswith(("acros", "monochrome", "sepia")):
        words += ["black", "white", "monochrome", "bw"]
    elif film:
        words += ["color", "colour"]
    width, height = meta.get("width"), meta.get("height")
    if width and height:
        words.append("portrait" if height > width else "square" if height == width else "landscape")
    date = meta.get("date") or ""
    if len(date) >= 13:
        month, hour = int(date[5:7]), int(date[11:13])
        if 1 <= month <= 12:
            words.append(MONTHS[month - 1])
            words.append(("winter", "spring", "summer", "autumn")[month % 12 // 3])
        words.append("night" if hour < 5 or hour >= 21 else "morning" if hour < 12
                     else "afternoon" if hour < 17 else "evening")
    if (meta.get("flash") or "").lower().startswith(("fired", "yes")):
        words.append("flash")
    return " ".join(words)


def _stat_key(path: Path, sidecar: Path) -> str:
    stat = path.stat()
    key = f"{stat.st_size}:{stat.st_mtime_ns}"
    if sidecar.exists():
        side = sidecar.stat()
        key += f"+{side.st_size}:{side.st_mtime_ns}"
    return key


def build_row(path: Path, data: bytes, sidecar_text: str | None, content_hash: str, stat_key: str,
              images_dir: Path, uploaded: str, now: str) -> dict:
    """One `photos` row for a JPEG (metadata, caption, thumbnails written); raises PhotoError."""
    if not data:
        raise PhotoError("empty file (0 bytes)")
    if not data.startswith(b"\xff\xd8\xff"):
        raise PhotoError("not a JPEG (wrong file signature)")
    extracted = read_metadata(data, sidecar_text)
    thumbs = make_thumbnails(data, path.stem, images_dir)
    meta = extracted.metadata
    date = meta.get("date")
    recipe = meta.get("recipe")
    return {
        "stem": path.stem, "file_name": path.name, "sha256": content_hash, "stat_key": stat_key,
        "size": len(data), "alt": extracted.alt, "camera": meta.get("camera"), "lens": meta.get("lens"),
        "film": meta.get("film"), "date": date[:10].replace(":", "-") if date else None, "taken": date,
        "year": int(date[:4]) if date else None,
        "recipe": json.dumps(recipe, ensure_ascii=False) if recipe else None,
        "recipe_text": recipe_text(recipe) or None,
        "metadata": json.dumps(meta, ensure_ascii=False),
        "thumb_avif": thumbs["avif"], "thumb_jpg": thumbs["jpg"], "thumb_small": thumbs["small"],
        "thumb_xs": thumbs["xs"], "expansion": expansion_words(meta), "extractor": EXTRACTOR,
        "extractor_version": EXTRACTOR_VERSION, "uploaded": uploaded, "updated": now,
    }


def caption_vectors(settings, conn, rows: list[dict], kept: list) -> list[tuple[str, bytes]]:
    """(sha256, float32 vector bytes) for the captions of the photos written this run and of kept
    photos that have no vector from the current model yet; [] when the model cannot be loaded."""
    stored = {r[0] for r in conn.execute("SELECT sha256 FROM photo_vectors WHERE model = ?", (ranker.MODEL_NAME,))}
    wanted = {row["sha256"]: row["alt"] for row in rows if row["alt"]}
    for row in kept:
        if row["alt"] and row["sha256"] not in stored:
            wanted.setdefault(row["sha256"], row["alt"])
    model = ranker.load_model(ranker.RankerSettings.from_settings(settings)) if wanted else None
    if model is None:
        return []
    # One caption per model run: on one thread batching is no faster and pads every caption.
    return [(sha, model.embed([alt])[0].tobytes())
            for sha, alt in tqdm(wanted.items(), desc="captions", unit="caption", disable=None)]


def _thumb_names(row) -> set[str]:
    return {row[k] for k in ("thumb_avif", "thumb_jpg", "thumb_small", "thumb_xs") if row[k]}


def _shown_name(path: Path) -> str:
    """The file name as text that can be logged and stored: bytes that are not UTF-8 as \\xNN."""
    return os.fsencode(path.name).decode("utf-8", "backslashreplace")


def run_photos(settings) -> str:
    """Ingest `settings.photos_dir` into the `photos` table and `settings.images_dir`; returns the summary.

    Raises RuntimeError when the originals folder is missing, or holds no JPEG while the archive
    has photos (rather than emptying the archive).
    """
    folder = Path(settings.photos_dir)
    if not folder.is_dir():
        raise RuntimeError(f"The photos folder {folder} does not exist; set photos_dir in site.toml "
                           f"(or run `python -m siteapi.demo_photos {folder}` for the demo set).")
    images_dir = Path(settings.images_dir)
    full_dir = images_dir / FULL_DIR
    started = time.time()
    conn = db.writer(settings.db_path)
    try:
        existing = {row["stem"]: row for row in conn.execute("SELECT * FROM photos")}
        entries = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
        jpeg_stems = {p.stem for p in entries if p.suffix.lower() in JPEG_SUFFIXES}
        if existing and not jpeg_stems and not (folder / EMPTY_MARKER).exists():
            raise RuntimeError(f"The photos folder {folder} holds no .jpg or .jpeg file while the archive has "
                               f"{len(existing)} photos, so nothing was changed: is the drive that holds the "
                               f"originals mounted? To empty the archive on purpose, create a file named "
                               f"{EMPTY_MARKER} in that folder and run the job again.")
        report, rows, touched, seen = IngestReport(), [], [], set()
        written: set[str] = set()
        copies: dict[str, Path] = {}  # public copy name → its staged file, renamed after the commit
        now = db.now_iso()
        try:
            for path in tqdm(entries, desc="photos", unit="file", disable=None):
                shown = _shown_name(path)
                if path.suffix.lower() not in JPEG_SUFFIXES:
                    if not (path.suffix.lower() == ".txt" and path.stem in jpeg_stems):
                        log.warning("skipped %s: not a JPEG (only .jpg and .jpeg files are ingested)", shown)
                        report.skipped.append(shown)
                    continue
                if shown != path.name:
                    log.warning("failed %s: the file name is not valid UTF-8", shown)
                    report.failed.append((shown, "the file name is not valid UTF-8 (rename the file)"))
                    continue
                if path.stem in seen:
                    report.failed.append((path.name, f"another file already has the name {path.stem}"))
                    continue
                seen.add(path.stem)
                old = existing.get(path.stem)
                sidecar = path.with_suffix(".txt")
                row, data = None, None
                try:
                    stat_key = _stat_key(path, sidecar)
                    current = old is not None and old["extractor_version"] == EXTRACTOR_VERSION
                    if not (current and old["stat_key"] == stat_key and old["file_name"] == path.name):
                        data = path.read_bytes()
                        sidecar_bytes = sidecar.read_bytes() if sidecar.exists() else b""
                        digest = hashlib.sha256(data)
                        if sidecar_bytes:
                            digest.update(b"\0sidecar\0" + sidecar_bytes)
                        content_hash = digest.hexdigest()
                        if current and old["sha256"] == content_hash and old["file_name"] == path.name:
                            touched.append((stat_key, path.stem))
                        else:
                            sidecar_text = sidecar_bytes.decode("utf-8", "replace") if sidecar_bytes else None
                            row = build_row(path, data, sidecar_text, content_hash, stat_key, images_dir,
                                            old["uploaded"] if old else now, now)
                            written |= _thumb_names(row)
                    if settings.originals_public and (row or not _copy_is_current(path, full_dir / path.name)):
                        copy = public_original(data if data is not None else path.read_bytes())
                        copies[path.name] = _stage_copy(full_dir, path.name, copy, path.stat().st_mtime_ns)
                except PhotoError as exc:
                    log.warning("failed %s: %s", path.name, exc)
                    report.failed.append((path.name, str(exc)))
                    continue
                except OSError as exc:
                    if exc.errno in OUR_DISK_FAULTS:  # no fault of this photo: the run fails, the archive stays
                        raise
                    log.warning("failed %s: %s", path.name, exc.strerror or exc)
                    report.failed.append((path.name, f"cannot read ({exc.strerror or exc})"))
                    continue
                if row:
                    rows.append(row)
                    (report.updated if old else report.added).append(path.stem)
            gone = [stem for stem in existing if stem not in seen]
            report.removed = gone
            written_stems = {row["stem"] for row in rows}
            kept = [old for stem, old in existing.items() if stem in seen and stem not in written_stems]
            vectors = caption_vectors(settings, conn, rows, kept)
            placeholders = ", ".join("?" for _ in PHOTO_COLUMNS)
            with db.transaction(conn):
                conn.executemany(
                    f"INSERT OR REPLACE INTO photos ({', '.join(PHOTO_COLUMNS)}) VALUES ({placeholders})",
                    [tuple(row[c] for c in PHOTO_COLUMNS) for row in rows])
                conn.executemany("UPDATE photos SET stat_key = ? WHERE stem = ?", touched)
                conn.executemany("DELETE FROM photos WHERE stem = ?", [(stem,) for stem in gone])
                # A rewritten photo's old vector may describe an old caption; without a model it stays unset.
                changes = conn.total_changes
                conn.executemany("DELETE FROM photo_vectors WHERE sha256 = ?", [(row["sha256"],) for row in rows])
                conn.executemany("INSERT OR REPLACE INTO photo_vectors (sha256, model, vector) VALUES (?, ?, ?)",
                                 [(sha, ranker.MODEL_NAME, blob) for sha, blob in vectors])
                conn.execute("DELETE FROM photo_vectors WHERE sha256 NOT IN "
                             "(SELECT sha256 FROM photos WHERE alt IS NOT NULL)")
                if rows or gone or conn.total_changes != changes:
                    conn.execute("INSERT INTO photos_state (id, generation) VALUES (1, 1) "
                                 "ON CONFLICT (id) DO UPDATE SET generation = generation + 1")
        except BaseException:
            _delete_files(images_dir, written - _all_referenced(existing.values()))
            _delete_files(full_dir, {temp.name for temp in copies.values()})
            raise
        # Thumbnails of removed photos, and those written for a file that then failed, go now;
        # those of replaced photos are marked with the time of their replacement and swept later.
        referenced = _all_referenced(rows + kept)
        _delete_files(images_dir, (written | _all_referenced(existing[stem] for stem in gone)) - referenced)
        superseded = _all_referenced(existing[stem] for stem in written_stems if stem in existing) - referenced
        for name in superseded:
            with contextlib.suppress(FileNotFoundError):
                os.utime(images_dir / name)
        if images_dir.is_dir():
            _sweep_superseded(images_dir, referenced)
        for name, temp in copies.items():
            os.replace(temp, full_dir / name)
        published = {r[0] for r in conn.execute("SELECT file_name FROM photos")} if settings.originals_public else set()
        if full_dir.is_dir():
            _delete_files(full_dir, {p.name for p in full_dir.iterdir()
                                     if p.is_file() and not p.name.startswith(".")} - published)
        for place in (images_dir, full_dir):
            _delete_stale_temps(place, started)
        return report.summary()
    finally:
        conn.close()


def _all_referenced(rows) -> set[str]:
    names = set()
    for row in rows:
        names |= _thumb_names(row)
    return names


def _sweep_superseded(images_dir: Path, referenced: set[str]) -> None:
    """Delete the thumbnails no photo names whose replacement is SUPERSEDED_GRACE_S old."""
    cutoff = time.time() - SUPERSEDED_GRACE_S
    _delete_files(images_dir, {entry.name for entry in os.scandir(images_dir)
                               if entry.is_file() and not entry.name.startswith(".")
                               and entry.name not in referenced and entry.stat().st_mtime < cutoff})


def _delete_stale_temps(folder: Path, before: float) -> None:
    """Delete the temporary files a run killed while writing left (one run at a time, under jobs.py's
    lock: this run's own are renamed or gone by now). By ctime: a staged copy carries an old mtime."""
    if folder.is_dir():
        _delete_files(folder, {entry.name for entry in os.scandir(folder) if entry.is_file()
                               and entry.name.startswith(".") and entry.name.endswith(".tmp")
                               and entry.stat().st_ctime < before})


def _delete_files(folder: Path, names: set[str]) -> None:
    for name in names:
        try:
            (folder / name).unlink()
        except FileNotFoundError:
            pass
