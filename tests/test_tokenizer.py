"""JapaneseTokenizer: content words, normalisation, and recall of kana names."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from rag_app.index.tokenizer import (
    BOUND,
    GRAM,
    JapaneseTokenizer,
    bound_terms,
    code_names,
    fold_kana,
    get_tokenizer,
    hiragana_bigrams,
    key_spans,
    key_term,
    quoted_keys,
    stem,
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
    assert {"hp", "90", "名前", f"{BOUND}hp#90"} <= set(row)


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
    bigrams = {GRAM + g for g in hiragana_bigrams(name)}
    assert bigrams
    assert bigrams <= set(tok(name))
    assert bigrams <= set(tok(context.format(name)))


def test_katakana_and_particles(tok: JapaneseTokenizer) -> None:
    tokens = tok("スライムの攻撃力")
    assert "すらいむ" in tokens
    assert "攻撃" in tokens
    assert "の" not in tokens


def test_katakana_compound_kept_whole(tok: JapaneseTokenizer) -> None:
    tokens = tok("メタルスライムが現れた")
    assert {"めたる", "すらいむ", "めたるすらいむ"} <= set(tokens)
    assert "めたるすらいむ" not in tok("スライムが現れた")


def test_mixed_english_japanese_and_numbers(tok: JapaneseTokenizer) -> None:
    tokens = tok("asyncioでHTTPサーバーを書く。HP: 90, MP 75")
    assert {"asyncio", "http", "さば", "hp", "90", "mp", "75"} <= set(tokens)
    assert "書く" in tokens


def test_verbs_and_adjectives_use_dictionary_form(tok: JapaneseTokenizer) -> None:
    tokens = tok("竜王を倒した。美しかった")
    assert "倒す" in tokens
    assert "美しい" in tokens
    assert "竜王" in tokens


def test_common_nouns_written_with_kanji_fold_to_one_spelling(tok: JapaneseTokenizer) -> None:
    """UniDic's lemma: a question written 子ども finds a manual that writes 子供."""
    words = [t for t in tok("子ども 子供") if not t.startswith(GRAM)]
    assert words == ["子供", "子供"]
    assert "打ち合わせ" in tok("打合せ") and "申し込み" in tok("申込み")
    # a kana spelling stays: MeCab would guess its lemma from the sentence around it
    assert "かみ" in tok("神社でかみにいのる") and "かみ" in tok("かみ")
    assert "ひのき" in tok("ひのきのぼう") and "ばつ" in tok("ばつ")
    assert "あいでい" in tok("アイディー")  # not ＩＤ
    assert "90" in tok("HPが90") and "りゆう" in tok("りゅうおう")  # numbers, names as written


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
    words = [t for t in tok("Python PYTHON python") if not t.startswith(GRAM)]
    assert words == ["python", "python", "python"]
    assert f"{GRAM}pyt" in tok("Python")  # Latin words of 4+ letters add trigrams


def test_fold_kana() -> None:
    assert fold_kana("スライム") == fold_kana("すらいむ") == "すらいむ"
    assert fold_kana("コンピューター") == fold_kana("コンピュータ") == "こんぴゆた"
    assert fold_kana("ヴァイオリン") == "ゔあいおりん"
    assert fold_kana("漢字abc") == "漢字abc"


@pytest.mark.parametrize(
    "variant",
    ["すらいむべす", "スライムベース", "ｽﾗｲﾑﾍﾞｽ", "スラィムベス"],
)
def test_kana_variants_share_every_name_gram(tok: JapaneseTokenizer, variant: str) -> None:
    # hiragana for katakana, an added long vowel, mixed script, half width, small kana
    doc = {t for t in tok("名前: スライムベス HP: 90") if t.startswith(GRAM)}
    query = {t for t in tok(f"{variant}のHPはいくつ？") if t.startswith(GRAM)}
    name = {GRAM + g for g in hiragana_bigrams("スライムベス")}
    assert name <= query
    assert name <= doc


def test_one_character_typo_keeps_most_grams(tok: JapaneseTokenizer) -> None:
    right = {t for t in tok("はぐれメタルスライム") if t.startswith(GRAM)}
    typo = {t for t in tok("はぐれメタルスライヌ") if t.startswith(GRAM)}
    assert len(right & typo) >= len(right) - 2
    assert right != typo


def test_bound_terms_tie_numbers_to_labels(tok: JapaneseTokenizer) -> None:
    assert bound_terms("hp: 90, mp: 75, 攻撃力: 100") == [
        f"{BOUND}hp#90",
        f"{BOUND}mp#75",
        f"{BOUND}攻撃力#100",
    ]
    assert f"{BOUND}no#57" in tok("モンスター一覧のNo.57は何？")
    assert f"{BOUND}hp#412" in tok("HPが412のモンスターは？")
    assert f"{BOUND}hp#412" in tok("HP 412")
    assert f"{BOUND}hp#41" not in tok("HP: 412")
    assert bound_terms("price 1,200") == [f"{BOUND}price#1200"]
    assert bound_terms("the 5 cats") == []  # a stop word is no label
    assert bound_terms("x200 pro") == [f"{BOUND}x#200"]  # a model code binds the same way


def test_empty_and_blank(tok: JapaneseTokenizer) -> None:
    assert tok("") == []
    assert tok(" \n\t　") == []
    assert tok("、。!?") == []


def test_spec_function_name() -> None:
    assert tokenize_japanese("スライム") == [
        "すらいむ",
        f"{GRAM}すら",
        f"{GRAM}らい",
        f"{GRAM}いむ",
    ]


def test_concurrent_use_gives_same_tokens(tok: JapaneseTokenizer) -> None:
    texts = [f"りゅうおう{i}のHPは{i * 3}です。スライム asyncio {i}" for i in range(60)]
    expected = [tok(t) for t in texts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(tok, texts))
    assert got == expected


def test_key_spans_take_the_longest_whole_key() -> None:
    keys = {key_term(k) for k in ["スライム", "メタルスライム", "Kelford", "Kelford Heights", "57"]}
    assert key_term(" ") is None and key_term("ｽﾗｲﾑ") == key_term("すらいむ")
    known = keys.__contains__
    assert key_spans("メタルスライムのHPは？", known) == [key_term("メタルスライム")]
    assert key_spans("すらいむのHPは？", known) == [key_term("スライム")]
    assert key_spans("Founding year of Kelford?", known) == [key_term("Kelford")]
    assert key_spans("Kelford Heights area", known) == [key_term("Kelford Heights")]
    assert key_spans("Kelfordshire", known) == []  # a Latin key must end at a word edge
    assert key_spans("No.157", known) == []


def test_code_names_are_whole_terms(tok: JapaneseTokenizer) -> None:
    tokens = tok("What is the signature of bisect.bisect_left?")
    assert "bisect.bisect_left" in tokens and "bisect_left" in tokens
    assert code_names("os.path.join(a) and _private") == ["os.path.join", "_private"]
    assert code_names("obj.__init__") == ["obj.__init__", "__init__"]
    assert code_names("www.example.com") == ["www.example.com"]
    # not names: abbreviations, versions, plain words, hostile runs
    assert code_names("e.g. i.e. 3.11.2 v1.2 plain words x_ _a") == []
    assert code_names("a_" + "b" * 200) == []
    # a path ends at `..`; a bad part keeps the other names; Markdown escapes
    assert code_names("json.load...nothing") == ["json.load"]
    assert code_names("3.bisect_left") == ["bisect_left"]
    assert code_names("bisect\\_left") == ["bisect_left"]


def test_one_character_keys_keep_case_and_match_only_quoted() -> None:
    assert key_term("n") != key_term("N")
    assert key_term("ｎ") == key_term("n") and key_term("!") == "@!"
    known = {key_term(k) for k in ["n", "N", "!", "@"]}.__contains__
    assert quoted_keys("Which C type does format character 'n' give?", known) == [key_term("n")]
    assert quoted_keys('the "N" code and 「@」', known) == [key_term("N"), key_term("@")]
    assert quoted_keys("Which byte order does the '!' character select?", known) == ["@!"]
    assert quoted_keys("n and N unquoted, isn't x'n'y", known) == []
    assert quoted_keys("書式文字「n」は？ structの'N'は", known) == [key_term("n"), key_term("N")]
    assert quoted_keys("format codes 'n','N' and '!'/'@'", known) == [
        key_term("n"),
        key_term("N"),
        "@!",
        "@@",
    ]
    assert quoted_keys("'q' is not stored", known) == []


def test_english_words_meet_their_other_forms(tok: JapaneseTokenizer) -> None:
    assert set(tok("the timeout expires")) & set(tok("it expired")) >= {stem("expires")}
    assert stem("freezing") == stem("freeze") != "freezing"
    assert stem("bisect_left") == "bisect_left" and stem("すらいむ") == "すらいむ"
    assert "bisect_left" in tok("bisect_left") and "listed" not in tok("listed")


def test_lone_surrogates_are_replaced_not_fatal() -> None:
    # MeCab raised UnicodeEncodeError on them (a command-line byte that is not UTF-8)
    assert get_tokenizer()("a\ud800スライム") == get_tokenizer()("a\ufffdスライム")
