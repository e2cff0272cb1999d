"""Prose chunking: paragraph → sentence → characters, sizes and overlap in characters."""

from __future__ import annotations

from itertools import pairwise

import pytest
from llama_index.core import Document
from llama_index.core.schema import MetadataMode, NodeRelationship

from rag_app.parsing.prose import ProseNodeParser, chunk_text, split_prose, split_sentences

JA_SENTENCES = [f"これは日本語の文その{i}です。" for i in range(40)]  # 13-14 chars each
JA_TEXT = "".join(JA_SENTENCES[:20]) + "\n\n" + "".join(JA_SENTENCES[20:])
EN_SENTENCES = [f"This is English sentence number {i}." for i in range(40)]
EN_TEXT = " ".join(EN_SENTENCES[:20]) + "\n\n" + " ".join(EN_SENTENCES[20:])


def test_split_sentences_japanese_keeps_terminators() -> None:
    text = "今日は晴れ。明日は雨！本当に？「はい。」と言った。"
    assert split_sentences(text) == [
        "今日は晴れ。",
        "明日は雨！",
        "本当に？",
        "「はい。」",
        "と言った。",
    ]


def test_split_sentences_english_needs_space_after_terminator() -> None:
    text = "Pi is 3.14 today. See example.com now! Really? Yes."
    assert split_sentences(text) == ["Pi is 3.14 today.", "See example.com now!", "Really?", "Yes."]


def test_a_numbered_list_items_number_is_not_a_sentence() -> None:
    """`4.` ending a chunk on its own came back as `4.` then `4. For ...` in a passage
    (two characters are too few to be taken for the chunker's overlap)."""
    text = "3. Only native.\n4. For the 'f' code, IEEE 754 is used. Always.\n  12. Twelve."
    assert split_sentences(text) == [
        "3. Only native.",
        "4. For the 'f' code, IEEE 754 is used.",
        "Always.",
        "12. Twelve.",
    ]
    assert split_sentences("Version 4. Then 5.") == ["Version 4.", "Then 5."]
    assert split_sentences("1.2. Sub item. More.") == ["1.2. Sub item.", "More."]


def test_split_sentences_line_breaks_are_boundaries() -> None:
    assert split_sentences("一行目\n二行目。三文目。") == ["一行目", "二行目。", "三文目。"]


@pytest.mark.parametrize("text", ["", "   ", "\n\n \t\n"], ids=["empty", "spaces", "blank"])
def test_empty_input_gives_no_chunks(text: str) -> None:
    assert split_prose(text) == []
    assert ProseNodeParser().get_nodes_from_documents([Document(text=text)]) == []


@pytest.mark.parametrize("text", ["短い文。", "A short one."], ids=["ja", "en"])
def test_short_text_is_one_chunk(text: str) -> None:
    assert split_prose(f"  {text}\n") == [text]


@pytest.mark.parametrize("text", [JA_TEXT, EN_TEXT], ids=["ja", "en"])
@pytest.mark.parametrize(("size", "overlap"), [(200, 30), (80, 20), (50, 0), (31, 30)])
def test_no_chunk_exceeds_chunk_size(text: str, size: int, overlap: int) -> None:
    chunks = split_prose(text, size, overlap)
    assert len(chunks) > 1
    assert all(0 < len(chunk) <= size for chunk in chunks)
    assert all(chunk == chunk.strip() for chunk in chunks)


@pytest.mark.parametrize(
    ("text", "sentences"), [(JA_TEXT, JA_SENTENCES), (EN_TEXT, EN_SENTENCES)], ids=["ja", "en"]
)
def test_every_sentence_survives_whole(text: str, sentences: list[str]) -> None:
    joined = "\n".join(split_prose(text, 100, 20))
    assert all(sentence in joined for sentence in sentences)


@pytest.mark.parametrize("text", [JA_TEXT, EN_TEXT], ids=["ja", "en"])
def test_consecutive_chunks_overlap_by_whole_sentences(text: str) -> None:
    chunks = split_prose(text, 100, 40)
    assert len(chunks) >= 8
    for previous, current in pairwise(chunks):
        before, after = split_sentences(previous), split_sentences(current)
        shared = next((k for k in range(len(before), 0, -1) if before[-k:] == after[:k]), 0)
        assert 1 <= shared < len(before), (previous, current)
        assert len(" ".join(after[:shared])) <= 40


def test_character_overlap_when_there_is_no_sentence_end() -> None:
    text = "".join(chr(ord("あ") + i % 80) for i in range(500))  # one long "sentence"
    chunks = split_prose(text, 100, 20)
    assert all(len(chunk) <= 100 for chunk in chunks)
    for previous, current in pairwise(chunks):
        assert current[:20] == previous[-20:]
    rebuilt = chunks[0] + "".join(chunk[20:] for chunk in chunks[1:])
    assert rebuilt == text


def test_character_overlap_starts_after_a_comma_in_japanese() -> None:
    lines = [f"勇者{i}は城を出て、長い旅に出発し、竜王の城を目指した" for i in range(8)]
    chunks = split_prose("\n".join(lines), 60, 20)
    assert len(chunks) > 3
    for previous, current in pairwise(chunks):
        overlap = current.split("\n")[0]
        assert 0 < len(overlap) <= 20
        assert previous.endswith(overlap)
        assert previous[-len(overlap) - 1] == "、", (previous, current)


def test_long_english_sentence_is_cut_between_words() -> None:
    words = [f"word{i:03d}" for i in range(120)]
    chunks = split_prose(" ".join(words), 60, 10)
    assert all(len(chunk) <= 60 for chunk in chunks)
    for chunk in chunks:
        assert set(chunk.split()) <= set(words), chunk
    assert {w for chunk in chunks for w in chunk.split()} == set(words)


def test_a_paragraph_that_fits_is_not_split_across_chunks() -> None:
    first = "一つ目の段落です。" * 12  # 108 chars
    second = "二つ目の段落です。" * 12
    chunks = split_prose(f"{first}\n\n{second}", 200, 30)
    assert chunks[0] == first
    assert chunks[1].endswith(second)
    assert len(chunks) == 2


def test_small_paragraphs_share_a_chunk_with_a_blank_line() -> None:
    assert split_prose("First.\n\n\n  Second.\n \nThird.", 200, 30) == [
        "First.\n\nSecond.\n\nThird."
    ]


def test_zero_overlap_means_disjoint_chunks() -> None:
    chunks = split_prose(JA_TEXT, 60, 0)
    assert "".join(chunks).replace("\n", "") == JA_TEXT.replace("\n", "")


def test_output_is_deterministic() -> None:
    assert split_prose(EN_TEXT, 90, 25) == split_prose(EN_TEXT, 90, 25)


def test_chunk_text_is_the_spec_name() -> None:
    assert chunk_text(JA_TEXT, 120, 20) == split_prose(JA_TEXT, 120, 20)


@pytest.mark.parametrize(("size", "overlap"), [(100, 100), (100, 150), (0, 0), (100, -1)])
def test_impossible_sizes_are_refused(size: int, overlap: int) -> None:
    with pytest.raises(ValueError, match="chunk"):
        split_prose("text", size, overlap)
    with pytest.raises(ValueError, match="chunk"):
        ProseNodeParser(chunk_size=size, chunk_overlap=overlap)


def test_node_parser_builds_linked_nodes_with_metadata() -> None:
    doc = Document(
        text=JA_TEXT,
        metadata={"source_url": "https://example.com/a", "title": "竜王", "indexed_at": 1},
    )
    nodes = ProseNodeParser(chunk_size=120, chunk_overlap=20).get_nodes_from_documents([doc])
    assert [n.get_content() for n in nodes] == split_prose(JA_TEXT, 120, 20)
    for index, node in enumerate(nodes):
        assert node.metadata == {
            "source_url": "https://example.com/a",
            "title": "竜王",
            "indexed_at": 1,
            "chunk_index": index,
            "content_type": "prose",
            "heading_path": "",
            "heading_level": 0,
        }
        context = {"title", "heading_path"}
        assert set(node.excluded_embed_metadata_keys) == set(node.metadata) - context
        assert set(node.excluded_llm_metadata_keys) == set(node.metadata) - context
        assert node.get_content(MetadataMode.EMBED) == "竜王\n" + node.get_content()
        assert node.get_content(MetadataMode.LLM) == "竜王\n" + node.get_content()
        assert node.ref_doc_id == doc.doc_id
    assert nodes[1].relationships[NodeRelationship.PREVIOUS].node_id == nodes[0].node_id
    assert nodes[0].relationships[NodeRelationship.NEXT].node_id == nodes[1].node_id


def test_node_parser_defaults_follow_the_settings_defaults() -> None:
    parser = ProseNodeParser()
    assert (parser.chunk_size, parser.chunk_overlap) == (200, 30)
    assert ProseNodeParser(100, 10).chunk_size == 100
