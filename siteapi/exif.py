"""A JPEG's metadata through exiv2: the §2.4 allowlist and the Fujifilm recipe card read from it,
and the public copy of the original that keeps only PUBLIC_EXIF.

`read_metadata` turns one JPEG's bytes into the §2.4 allowlist (python-exiv2) plus the Fujifilm
recipe card in the names photographers use, with width and height as the photo is displayed
(EXIF Orientation applied) and no date that is not a real calendar date and time;
`public_original` is the original with its image data byte for byte and only PUBLIC_EXIF and the
colour profile left of its metadata (what /images/full/ serves). EXTRACTOR_VERSION names the rules
a stored row was read under: the ingest job (ingest.py) reads again every row read under others.
Nothing outside the allowlist (GPS, serial numbers, owner names) is ever copied.
"""
from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction

import exiv2

from siteapi import graphemes

# Bump RULES when what read_metadata makes of a file changes (the mapping below, dimensions,
# dates): rows read under other rules are re-read. 2: displayed orientation, real dates only.
# 3: text that is not UTF-8 read as windows-1252, the digitized date before the file's, no camera
# boilerplate or control characters in captions. 4: a long caption cut between the characters a
# reader sees (siteapi/graphemes.py), not inside one.
RULES = 4
EXTRACTOR = "exiv2"
EXTRACTOR_VERSION = f"libexiv2 {exiv2.version()}; python-exiv2 {exiv2.__version__}; rules {RULES}"

ALT_MAX = 240
# The EXIF a public copy of an original keeps: the tags the §2.4 metadata is read from, and those
# that show the pixels right (orientation, colour space, resolution). GPS, serial numbers, owner
# and copyright names, the MakerNote and everything else go.
PUBLIC_EXIF = frozenset({
    "Exif.Image.Make", "Exif.Image.Model", "Exif.Image.Orientation", "Exif.Image.DateTime",
    "Exif.Image.XResolution", "Exif.Image.YResolution", "Exif.Image.ResolutionUnit", "Exif.Image.YCbCrPositioning",
    "Exif.Photo.ExifVersion", "Exif.Photo.DateTimeOriginal", "Exif.Photo.DateTimeDigitized", "Exif.Photo.ExposureTime", "Exif.Photo.FNumber",
    "Exif.Photo.ISOSpeedRatings", "Exif.Photo.FocalLength", "Exif.Photo.ExposureBiasValue", "Exif.Photo.LensModel",
    "Exif.Photo.ColorSpace", "Exif.Photo.WhiteBalance", "Exif.Photo.Flash", "Exif.Photo.ExposureMode",
    "Exif.Photo.MeteringMode", "Exif.Photo.Sharpness", "Exif.Photo.PixelXDimension", "Exif.Photo.PixelYDimension",
    "Exif.Iop.InteroperabilityIndex", "Exif.Iop.InteroperabilityVersion",
})
# The APPn segments a public copy keeps (marker, signature): JFIF, the rewritten EXIF, the ICC
# profile, Adobe's colour transform. exiv2 leaves maker segments, MPF previews and data after the
# image's end in place, so the copy drops every other APPn and COM segment and all that trails.
KEPT_SEGMENTS = ((0xE0, b"JFIF\0"), (0xE1, b"Exif\0\0"), (0xE2, b"ICC_PROFILE\0"), (0xEE, b"Adobe"))
# Of these only the first counts: exiv2 rewrites the first EXIF segment, and a second one (left by
# an editor that appended its own) would keep its GPS and serial numbers. A profile spans several.
FIRST_ONLY = (b"JFIF\0", b"Exif\0\0", b"Adobe")
# Descriptions camera firmware writes in every frame: they name the camera, not the photo.
CAMERA_DESCRIPTIONS = frozenset({
    "digital camera", "olympus digital camera", "sony dsc", "kodak digital still camera",
    "minolta digital camera", "samsung digital camera", "pentax digital camera", "default",
})
# C0 and C1 control characters and the byte-order mark have no place in a caption.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\ufeff]")

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


# ---------------------------------------------------------------------------------------------
# reading the metadata


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


def _as_cp1252(error: UnicodeDecodeError) -> tuple[str, int]:
    return error.object[error.start:error.end].decode("cp1252", "replace"), error.end


codecs.register_error("siteapi.cp1252", _as_cp1252)


def _readable(text: str) -> str:
    """exiv2's text with the bytes that are not UTF-8 (a Latin-1 caption from an older tool, bit
    rot) read as windows-1252, the rest as the UTF-8 it is: python-exiv2 hands such bytes over as
    lone surrogates, which SQLite and the tokenizer refuse."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "siteapi.cp1252")


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
        text = _readable(text).strip("\x00 \t\r\n")
        return text or None

    def printed(self, key: str) -> str | None:
        datum = self.by_key.get(key)
        if datum is None:
            return None
        text = _readable(datum.print(self.exif)).strip()
        return text or None


def _clean_caption(text: str | None, camera: tuple[str | None, ...] = ()) -> str | None:
    """A caption of at most ALT_MAX characters on one line; None for none, or for what only names
    the camera (its make, its model, its firmware's boilerplate)."""
    if not text:
        return None
    text = " ".join(_CONTROLS.sub(" ", text).split())
    if text.lower() in CAMERA_DESCRIPTIONS or text.lower() in {" ".join(filter(None, camera)).lower(), *(
            part.lower() for part in camera if part)}:
        return None
    if len(text) <= ALT_MAX:
        return text or None
    cut = graphemes.cut(text, ALT_MAX - 1)
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
        # When the shutter was pressed; the digitized time is the same in camera files, the file's
        # own DateTime (last changed) is the last resort.
        "date": _real_date(tags.text("Exif.Photo.DateTimeOriginal") or tags.text("Exif.Photo.DateTimeDigitized")
                           or tags.text("Exif.Image.DateTime")),
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
        caption = _clean_caption(tags.text(key), (make, model, camera))
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
# the public copy of an original


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
    # With nothing public to keep exiv2 writes no EXIF segment, and a second one the original carried
    # would become the first: then none is kept.
    copy = _kept_segments(bytes(image.io().mmap()), exif=kept.count() > 0)
    _assert_public(copy)
    return copy


# exiv2 writes the links to the sub-IFDs the public tags live in.
_IFD_POINTERS = frozenset({"Exif.Image.ExifTag", "Exif.Photo.InteroperabilityTag"})


def _assert_public(copy: bytes) -> None:
    """The copy, read again, holds only PUBLIC_EXIF: whatever way a file found around the rewrite,
    it fails here rather than publish a location or a serial number."""
    image = _open_jpeg(copy)
    leaked = {d.key() for d in image.exifData()} - PUBLIC_EXIF - _IFD_POINTERS
    if leaked or image.iptcData().count() or image.xmpData().count():
        raise PhotoError(f"its metadata could not be reduced to the public tags ({', '.join(sorted(leaked))[:200]})")


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


def _kept_segments(jpeg: bytes, exif: bool = True) -> bytes:
    """`jpeg` without the APPn and COM segments KEPT_SEGMENTS does not name (nor a FIRST_ONLY one
    after its first) and without anything after its end-of-image marker; every other segment and
    the image data unchanged; without `exif`, no EXIF segment at all."""
    parts, at, seen = [jpeg[:2]], 2, set()
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
        kind = next((signature for kept, signature in KEPT_SEGMENTS
                     if marker == kept and jpeg.startswith(signature, at + 4)), None)
        if kind == b"Exif\0\0" and not exif:
            kind = None
        if not metadata or (kind and kind not in seen):
            parts.append(jpeg[at:end])
            if kind in FIRST_ONLY:
                seen.add(kind)
        at = end
    return b"".join(parts)
