"""Bytes → text: BOM, HTTP charset, meta charset, Japanese guesses, never a crash."""

from __future__ import annotations

import codecs

from rag_app.crawl.charset import codec_for, decode_body, meta_charset

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
