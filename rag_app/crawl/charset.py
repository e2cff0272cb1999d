"""Bytes → text for crawled pages, never crashing on bad bytes.

Order (as browsers do): byte-order mark, then the HTTP `charset`, then `<meta charset>` /
`http-equiv` in the first 4 KB (HTML only), then a guess (strict UTF-8, then Shift_JIS/cp932
or EUC-JP by Japanese-character share), finally UTF-8 with replacement characters.
"""

from __future__ import annotations

import codecs
import re

_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)

# WHATWG label aliases Python does not know, or supersets browsers use instead.
_ALIASES = {
    "shift_jis": "cp932",
    "shift-jis": "cp932",
    "sjis": "cp932",
    "x-sjis": "cp932",
    "ms_kanji": "cp932",
    "csshiftjis": "cp932",
    "windows-31j": "cp932",
    "ms932": "cp932",
    "x-euc-jp": "euc_jp",
    "iso-8859-1": "cp1252",
    "latin1": "cp1252",
    "us-ascii": "cp1252",
    "ascii": "cp1252",
}

_META_CHARSET = re.compile(
    rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]+)""", re.IGNORECASE
)
_JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff\uff66-\uff9f]")


def codec_for(label: str | None) -> str | None:
    """Python codec name for a charset label, or None if unknown."""
    if not label:
        return None
    name = label.strip().strip("\"'").lower()
    name = _ALIASES.get(name, name)
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def meta_charset(body: bytes) -> str | None:
    """The charset declared by `<meta charset>` or `http-equiv` in the first 4 KB."""
    match = _META_CHARSET.search(body[:4096])
    return match.group(1).decode("ascii", "replace") if match else None


def _japanese_share(text: str) -> float:
    return len(_JAPANESE.findall(text)) / max(len(text), 1)


def _guess(body: bytes) -> tuple[str, str]:
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    candidates: list[tuple[float, str, str]] = []
    for codec in ("cp932", "euc_jp"):
        try:
            text = body.decode(codec)
        except UnicodeDecodeError:
            continue
        candidates.append((_japanese_share(text), codec, text))
    if candidates:
        _share, codec, text = max(candidates, key=lambda c: c[0])
        return text, codec
    return body.decode("utf-8", errors="replace"), "utf-8"


def decode_body(body: bytes, header_charset: str | None, *, is_html: bool) -> tuple[str, str]:
    """Decode a response body; return `(text, codec_used)`."""
    for bom, codec in _BOMS:
        if body.startswith(bom):
            return body[len(bom) :].decode(codec, errors="replace"), codec
    declared = codec_for(header_charset)
    if declared is None and is_html:
        declared = codec_for(meta_charset(body))
        if declared and declared.startswith("utf-16"):
            declared = "utf-8"  # a meta tag cannot declare UTF-16 (the bytes are ASCII-compatible)
    if declared is not None:
        return body.decode(declared, errors="replace"), declared
    return _guess(body)
