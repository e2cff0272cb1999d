"""JapaneseTokenizer: content words, normalisation, and recall of kana names."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from rag_app.index.tokenizer import (
    JapaneseTokenizer,
    get_tokenizer,
    hiragana_bigrams,
    tokenize_japanese,
)


@pytest.fixture(scope="module")
def tok() -> JapaneseTokenizer:
    return get_tokenizer()


def test_singleton_is_shared() -> None:
    assert get_tokenizer() is get_tokenizer()


def test_hiragana_name_query_matches_table_row(tok: JapaneseTokenizer) -> None:
    query = tok("りゅうおう")
    row = tok("名前: りゅうおう HP: 90")
    assert query
    assert set(query) <= set(row)
    assert {"hp", "90", "名前"} <= set(row)


@pytest.mark.parametrize(
    "name", ["りゅうおう", "だいまどう", "ももんじゃ", "ゆうしゃ", "すらりん", "あくまのきし"]
)
@pytest.mark.parametrize(
    "context", ["名前: {} HP: 90", "{}の攻撃力は高い", "{}を倒す", "| {} | 90 | 75 |"]
)
def test_kana_names_recallable_in_any_context(
    tok: JapaneseTokenizer, name: str, context: str
) -> None:
    # MeCab splits these names differently by context; the hiragana bigrams do not.
    bigrams = set(hiragana_bigrams(name))
    assert bigrams
    assert bigrams <= set(tok(name))
    assert bigrams <= set(tok(context.format(name)))


def test_katakana_and_particles(tok: JapaneseTokenizer) -> None:
    tokens = tok("スライムの攻撃力")
    assert "スライム" in tokens
    assert "攻撃" in tokens
    assert "の" not in tokens


def test_katakana_compound_kept_whole(tok: JapaneseTokenizer) -> None:
    tokens = tok("メタルスライムが現れた")
    assert {"メタル", "スライム", "メタルスライム"} <= set(tokens)
    assert "メタルスライム" not in tok("スライムが現れた")


def test_mixed_english_japanese_and_numbers(tok: JapaneseTokenizer) -> None:
    tokens = tok("asyncioでHTTPサーバーを書く。HP: 90, MP 75")
    assert {"asyncio", "http", "サーバー", "hp", "90", "mp", "75"} <= set(tokens)
    assert "書く" in tokens


def test_verbs_and_adjectives_use_dictionary_form(tok: JapaneseTokenizer) -> None:
    tokens = tok("竜王を倒した。美しかった")
    assert "倒す" in tokens
    assert "美しい" in tokens
    assert "竜王" in tokens


def test_nfkc_full_width_and_half_width_kana(tok: JapaneseTokenizer) -> None:
    assert tok("ＨＰ：９０　ＭＰ：７５") == tok("HP:90 MP:75")
    assert "hp" in tok("ＨＰ：９０")
    assert tok("ｽﾗｲﾑ") == tok("スライム")


def test_stop_words_and_punctuation_removed(tok: JapaneseTokenizer) -> None:
    tokens = tok("これはとてもおいしいです。The cat is on the mat!")
    for stop in ("これ", "です", "は", "。", "the", "is", "on", "!"):
        assert stop not in tokens
    assert {"おいしい", "cat", "mat"} <= set(tokens)


def test_lower_case(tok: JapaneseTokenizer) -> None:
    assert tok("Python PYTHON python") == ["python", "python", "python"]


def test_empty_and_blank(tok: JapaneseTokenizer) -> None:
    assert tok("") == []
    assert tok(" \n\t　") == []
    assert tok("、。!?") == []


def test_spec_function_name() -> None:
    assert tokenize_japanese("スライム") == ["スライム"]


def test_concurrent_use_gives_same_tokens(tok: JapaneseTokenizer) -> None:
    texts = [f"りゅうおう{i}のHPは{i * 3}です。スライム asyncio {i}" for i in range(60)]
    expected = [tok(t) for t in texts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(tok, texts))
    assert got == expected
