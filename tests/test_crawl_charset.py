"""Bytes → text: BOM, HTTP charset, meta charset, Japanese guesses, never a crash."""

from __future__ import annotations

import codecs
import time

import pytest

from rag_app.crawl.charset import binary_kind, codec_for, decode_body, meta_charset

JAPANESE = "りゅうおうの攻撃力は100です。スライムは弱い。"


def test_meta_charset_shift_jis() -> None:
    body = f'<html><head><meta charset="Shift_JIS"></head><body>{JAPANESE}</body></html>'
    text, codec = decode_body(body.encode("cp932"), None, is_html=True)
    assert JAPANESE in text
    assert codec == "cp932"


def test_http_equiv_euc_jp() -> None:
    body = f'<meta http-equiv="Content-Type" content="text/html; charset=EUC-JP"><p>{JAPANESE}</p>'
    text, codec = decode_body(body.encode("euc_jp"), None, is_html=True)
    assert JAPANESE in text and codec == "euc_jp"


def test_http_header_wins_over_meta() -> None:
    body = f'<meta charset="euc-jp"><p>{JAPANESE}</p>'.encode("cp932")
    text, codec = decode_body(body, "shift_jis", is_html=True)
    assert JAPANESE in text and codec == "cp932"


def test_bom_wins_over_everything() -> None:
    body = codecs.BOM_UTF8 + f'<meta charset="shift_jis"><p>{JAPANESE}</p>'.encode()
    text, codec = decode_body(body, "iso-8859-1", is_html=True)
    assert JAPANESE in text and codec == "utf-8"


def test_a_utf32_mark_is_not_read_as_utf16() -> None:
    """UTF-32LE's mark begins with UTF-16LE's: a short UTF-32 file was stored as UTF-16
    text full of NULs (a longer one refused as binary)."""
    for bom, codec in ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be")):
        body = bom + "dragon 竜".encode(codec)
        assert binary_kind(body) is None  # its NULs are text
        assert decode_body(body, None, is_html=False) == ("dragon 竜", codec)
    assert decode_body(codecs.BOM_UTF16_LE + "ab".encode("utf-16-le"), None, is_html=False) == (
        "ab",
        "utf-16-le",
    )


def test_undeclared_shift_jis_and_euc_jp_are_guessed() -> None:
    long_text = JAPANESE * 5
    assert decode_body(long_text.encode("cp932"), None, is_html=True) == (long_text, "cp932")
    assert decode_body(long_text.encode("euc_jp"), None, is_html=True) == (long_text, "euc_jp")


def test_broken_bytes_never_crash() -> None:
    body = "正しい文字".encode() + b"\xff\xfe\x80\x81\xc3" + "続き".encode()
    text, codec = decode_body(body, None, is_html=True)
    assert "正しい文字" in text and "続き" in text and "\ufffd" in text
    assert codec == "utf-8"
    # A declared charset that does not match: replacement characters, no exception.
    text, _ = decode_body(b"\x82\xa0\xff\xff", "utf-8", is_html=False)
    assert "\ufffd" in text


def test_unknown_labels_fall_through() -> None:
    assert codec_for("no-such-charset") is None
    assert codec_for("windows-31j") == "cp932"
    text, codec = decode_body(f"<p>{JAPANESE}</p>".encode(), "x-unknown", is_html=True)
    assert JAPANESE in text and codec == "utf-8"


def test_meta_charset_reads_only_the_first_4kb() -> None:
    assert meta_charset(b"<meta charset='utf-8'>") == "utf-8"
    assert meta_charset(b" " * 5000 + b"<meta charset='utf-8'>") is None


def test_meta_cannot_declare_utf16() -> None:
    text, codec = decode_body(f'<meta charset="utf-16"><p>{JAPANESE}'.encode(), None, is_html=True)
    assert JAPANESE in text and codec == "utf-8"


FRENCH = "Le cœur a ses raisons que la raison ne connaît point. À bientôt, garçon!"


@pytest.mark.parametrize(
    "label",
    [
        "x-unknown-123",
        "utf-7",
        "UTF-7",
        "base64",
        "zlib",
        "rot13",
        "undefined",
        "punycode",
        "idna",
        "unicode_escape",
        "utf-32",
        "ｕｔｆ-８",
        "utf-8\x00",
        "x" * 10_000,
        "",
    ],
)
def test_bogus_or_unsafe_labels_are_ignored(label: str) -> None:
    assert codec_for(label) is None
    # Declared in the HTTP header: detection decides, nothing raises.
    body = FRENCH.encode("cp1252")
    assert decode_body(body, label, is_html=False) == (FRENCH, "cp1252")


@pytest.mark.parametrize("label", ["x-unknown-123", "utf-7", "base64", "undefined", "x" * 100])
def test_bogus_meta_charset_falls_back_to_detection(label: str) -> None:
    body = f'<meta charset="{label}"><p>{FRENCH}</p>'.encode("cp1252")
    text, codec = decode_body(body, None, is_html=True)
    assert FRENCH in text and codec == "cp1252"


def test_utf7_is_never_used() -> None:
    text, codec = decode_body(b"+ADw-script+AD4-alert(1)", "utf-7", is_html=True)
    assert (text, codec) == ("+ADw-script+AD4-alert(1)", "utf-8")


def test_web_labels_still_work() -> None:
    assert codec_for("l1") == "cp1252"  # every Latin-1 label decodes as windows-1252
    assert codec_for("UTF8") == "utf-8"
    assert codec_for("koi8-r") == "koi8-r"
    assert codec_for("gb2312") == "gb2312"
    assert codec_for("ISO-2022-JP") == "iso2022_jp"
    assert codec_for("utf-16le") == "utf-16-le"


def test_undeclared_non_japanese_text_is_detected() -> None:
    assert decode_body(FRENCH.encode("cp1252"), None, is_html=False) == (FRENCH, "cp1252")
    russian = "Съешь же ещё этих мягких французских булок, да выпей чаю."
    text, codec = decode_body(russian.encode("koi8_r"), None, is_html=False)
    assert (text, codec) == (russian, "koi8-r")


def test_detection_reads_a_bounded_prefix() -> None:
    body = (FRENCH + "\n").encode("cp1252") * 40_000  # 3 MB
    started = time.perf_counter()
    text, codec = decode_body(body, "bogus", is_html=False)
    assert codec == "cp1252" and text.startswith(FRENCH)
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b"%PDF-1.4 rest", "a PDF document"),
        (b"PK\x03\x04rest", "a ZIP archive"),
        (b"PK\x05\x06" + b"\x00" * 18, "a ZIP archive"),
        (b"\x89PNG\r\n\x1a\nrest", "a PNG image"),
        (b"\xff\xd8\xff\xe0rest", "a JPEG image"),
        (b"GIF87arest", "a GIF image"),
        (b"GIF89arest", "a GIF image"),
        (b"\x1f\x8b\x08rest", "gzip-compressed data"),
        (b"<html>\x00</html>", "binary data (NUL bytes)"),
        (b"x" * 1023 + b"\x00", "binary data (NUL bytes)"),
    ],
)
def test_binary_kinds(body: bytes, kind: str) -> None:
    assert binary_kind(body) == kind


def test_text_is_not_binary() -> None:
    assert binary_kind(f"<p>{JAPANESE}</p>".encode()) is None
    assert binary_kind(f"<p>{JAPANESE}</p>".encode("cp932")) is None
    assert binary_kind(b"x" * 1024 + b"\x00") is None  # only the first KB is sniffed
    assert binary_kind(b"") is None
    utf16 = f"<p>{JAPANESE}</p>".encode("utf-16")  # with a BOM
    assert binary_kind(utf16) is None
    assert binary_kind(f"<p>{JAPANESE}</p>".encode("utf-16-le"), "utf-16le") is None
    assert binary_kind(f"<p>{JAPANESE}</p>".encode("utf-16-le"), "x-bogus") is not None


def test_decoded_noise_is_binary_and_real_text_is_not() -> None:
    import random

    from rag_app.crawl.charset import decode_body, garbled_kind

    noise = bytes(b for b in random.Random(3).randbytes(900) if b)[:600]
    assert binary_kind(noise) is None  # no NUL, no signature
    assert garbled_kind(decode_body(noise, None, is_html=False)[0]) is not None
    for text in (
        JAPANESE * 20,
        "plain English text\twith tabs\r\nand lines\f" * 20,
        "\x1b[31mred\x1b[0m log line\n" * 50,  # a terminal log with colour codes
        "short \x01\x02",  # too short to judge
    ):
        assert garbled_kind(text) is None, text[:40]
    assert garbled_kind(decode_body(JAPANESE.encode("cp932") * 5, None, is_html=False)[0]) is None
    # a page that declares the wrong charset is read with the bytes' own guess, not refused
    sjis = (f"<p>{JAPANESE}</p>" * 10).encode("cp932")
    text, codec = decode_body(sjis, "utf-8", is_html=True)
    assert garbled_kind(text) is None and JAPANESE in text, codec
    assert garbled_kind("N\bNA\bAM\bME\bE ls - list directory contents\n" * 30) is None
