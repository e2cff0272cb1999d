"""Bytes → text for crawled pages and local files, never crashing on bad bytes.

Order (as browsers do): byte-order mark, then the HTTP `charset`, then `<meta charset>` /
`http-equiv` in the first 4 KB (HTML only), then a guess (strict UTF-8; Shift_JIS/cp932 or
EUC-JP by Japanese-character share when the text has kana; charset-normalizer; a Japanese
decoding without kana), finally UTF-8 with replacement characters. A declared label only
counts when it names a web text encoding: a bogus, over-long or unsafe one (`x-unknown-123`,
`utf-7`, `base64`, `undefined`) falls through to the guess instead of raising.

`binary_kind` spots bodies that are not text at all (NUL bytes, PDF/ZIP/image/gzip
signatures) so callers can refuse them with one sentence.
"""

from __future__ import annotations

import codecs
import re

from charset_normalizer import from_bytes

_BOMS: tuple[tuple[bytes, str], ...] = (  # UTF-32 first: its LE mark begins as UTF-16's
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
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
_SUPERSETS = {"iso8859-1": "cp1252", "ascii": "cp1252"}  # as browsers decode them
# Text encodings of the web (WHATWG Encoding Standard, plus the Japanese variants Python
# has). Anything else Python knows is refused: UTF-7 (unsafe), `base64`/`zlib`/`rot13`
# (not text), `undefined` (always raises), `punycode`/`idna` (slow on hostile input).
_WEB_CODECS = frozenset(
    codecs.lookup(name).name
    for name in (  # noqa: SIM905 (one family per line reads better than 50 list items)
        "utf-8 utf-16 utf-16-le utf-16-be cp866 koi8-r koi8-u mac-roman mac-cyrillic "
        "iso8859-2 iso8859-3 iso8859-4 iso8859-5 iso8859-6 iso8859-7 iso8859-8 iso8859-9 "
        "iso8859-10 iso8859-11 iso8859-13 iso8859-14 iso8859-15 iso8859-16 cp874 tis-620 "
        "cp1250 cp1251 cp1252 cp1253 cp1254 cp1255 cp1256 cp1257 cp1258 "
        "gbk gb2312 gb18030 big5 big5hkscs cp950 euc-kr cp949 "
        "euc-jp euc_jis_2004 euc_jisx0213 iso2022-jp shift_jis cp932 shift_jis_2004 "
        "shift_jisx0213"
    ).split()
)
_MAX_LABEL_CHARS = 40
_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.:")

# `[^>]*?` stays inside one tag; `\s*(?:["']\s*)?` has one way to match the spaces and quote
# (`\s*["']?\s*` had many, which backtracked quadratically on a long run of spaces).
_META_CHARSET = re.compile(
    rb"""<meta[^>]*?charset\s*=\s*(?:["']\s*)?([A-Za-z0-9_.:\-]+)""", re.IGNORECASE
)
_META_WINDOW = 4096
_JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff\uff66-\uff9f]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_DETECT_BYTES = 64 * 1024  # charset-normalizer sees at most this much (bounded cost)
# Japanese is guessed before charset-normalizer; left to it, a cp932 misreading of mostly
# ASCII Western text can win over windows-1252.
_JAPANESE_CODECS = [
    *("cp932", "shift_jis", "shift_jis_2004", "shift_jisx0213"),
    *("euc_jp", "euc_jis_2004", "euc_jisx0213"),
    *("iso2022_jp", "iso2022_jp_1", "iso2022_jp_2", "iso2022_jp_2004", "iso2022_jp_3"),
    "iso2022_jp_ext",
]
_SNIFF_BYTES = 1024
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"%PDF-", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"PK\x05\x06", "a ZIP archive"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"\x1f\x8b", "gzip-compressed data"),
)


def codec_for(label: str | None) -> str | None:
    """Python codec name for a web charset label, or None if unknown, bogus or unsafe."""
    if not label:
        return None
    name = label.strip().strip("\"'").lower()
    if len(name) > _MAX_LABEL_CHARS or not set(name) <= _LABEL_CHARS:
        return None
    name = _ALIASES.get(name, name)
    try:
        codec = codecs.lookup(name).name
    except LookupError:
        return None
    codec = _SUPERSETS.get(codec, codec)
    return codec if codec in _WEB_CODECS else None


def meta_charset(body: bytes) -> str | None:
    """The charset declared by `<meta charset>` or `http-equiv` in the first 4 KB."""
    match = _META_CHARSET.search(body[:_META_WINDOW])
    return match.group(1).decode("ascii", "replace") if match else None


def binary_kind(body: bytes, header_charset: str | None = None) -> str | None:
    """What a body is if it is not text (`"a PDF document"`, …), else None.

    A known file signature, or a NUL byte in the first KB (UTF-16 or UTF-32 text, marked
    by a BOM or a declared charset, has NULs and is not binary).
    """
    for signature, kind in _SIGNATURES:
        if body.startswith(signature):
            return kind
    head = body[:_SNIFF_BYTES]
    if b"\x00" not in head:
        return None
    if head.startswith(tuple(bom for bom, codec in _BOMS if codec != "utf-8")):
        return None  # UTF-16 or UTF-32 text, marked
    if (codec_for(header_charset) or "").startswith(("utf-16", "utf-32")):
        return None
    return "binary data (NUL bytes)"


GARBLED_SHARE = 0.1
"""Share of undecodable or control characters (beyond tabs and line breaks) above which
decoded text is binary data: random bytes without a NUL decode to ~55 %; real text, even
a terminal log full of colour codes or a man page's overstrikes (backspaces), stays far
below."""


_GARBLED = re.compile("[\x00-\x07\x0e-\x1a\x1c-\x1f\x7f-\x9f\ufffd]")
"""Undecodable or control characters: all but tab, line breaks, form feed, backspace
(overstrike) and escape (colour codes)."""


def garbled_kind(text: str) -> str | None:
    """`"binary data (undecodable bytes)"` when the first 8,000 characters of decoded text
    are mostly not text (binary bytes that hold no NUL pass `binary_kind`), else None."""
    head = text[:8000]
    if len(head) < 64:
        return None
    bad = len(_GARBLED.findall(head))
    return "binary data (undecodable bytes)" if bad > GARBLED_SHARE * len(head) else None


def _japanese_share(text: str) -> float:
    return len(_JAPANESE.findall(text)) / max(len(text), 1)


def _has_kana(text: str) -> bool:
    """Hiragana/katakana make up >= 10 % of the non-ASCII characters (real Japanese does;
    Western bytes misread as cp932 give kanji and half-width katakana instead)."""
    non_ascii = len(text) - len(text.encode("ascii", "ignore"))
    kana = len(_KANA.findall(text))
    return kana > 0 and kana * 10 >= non_ascii


def _guess_japanese(body: bytes) -> tuple[str, str] | None:
    candidates: list[tuple[float, str, str]] = []
    for codec in ("cp932", "euc_jp"):
        try:
            text = body.decode(codec)
        except UnicodeDecodeError:
            continue
        candidates.append((_japanese_share(text), codec, text))
    if not candidates:
        return None
    _share, codec, text = max(candidates, key=lambda c: c[0])
    return text, codec


def detect_codec(body: bytes) -> str | None:
    """charset-normalizer's best non-Japanese web encoding for the first 64 KB, or None.

    Among equally good guesses windows-1252 wins, as in browsers (charset-normalizer
    otherwise picks e.g. cp1250 for French and turns `è` into `č`).
    """
    results = from_bytes(body[:_DETECT_BYTES], cp_exclusion=_JAPANESE_CODECS)
    matches = [m for m in results if codec_for(m.encoding)]
    if not matches:
        return None
    best = matches[0]
    for match in matches:
        same = (match.chaos, match.coherence) == (best.chaos, best.coherence)
        if same and "cp1252" in match.could_be_from_charset:
            return "cp1252"
    return codec_for(best.encoding)


def _guess(body: bytes) -> tuple[str, str]:
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    japanese = _guess_japanese(body)
    if japanese is not None and _has_kana(japanese[0]):
        return japanese
    codec = detect_codec(body)
    if codec is not None:
        return body.decode(codec, errors="replace"), codec
    if japanese is not None:
        return japanese
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
        text = body.decode(declared, errors="replace")
        if garbled_kind(text) is not None:  # a wrong declared charset: the bytes' own guess
            guessed = _guess(body)
            if garbled_kind(guessed[0]) is None:
                return guessed
        return text, declared
    return _guess(body)
