"""StructuredNodeParser: headings, tables and prose routed in document order."""

from __future__ import annotations

import random
import time

import chromadb
import pytest
from llama_index.core import Document
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.schema import MetadataMode

from rag_app.config import load_settings
from rag_app.parsing import StructuredNodeParser, structured_chunks
from rag_app.parsing.router import CODE_BLOCK_CHARS, split_blocks
from rag_app.parsing.tables import Table

JA_PAGE = """モンスター図鑑へようこそ。このページでは敵の強さをまとめている。

# モンスター図鑑

## ボス
ボスは城の奥にいる。

| 名前 | HP | MP | 攻撃力 |
|---|---|---|---|
| りゅうおう | 90 | 75 | 100 |
| ハーゴン | 80 | 200 | 60 |

ボスは手強い。

## ザコ
スライムは弱い。ドラキーも弱い。

### 補足
<h3>呪文</h3>
ホイミで回復できる。
"""

EN_PAGE = """# Bestiary
An introduction to the monsters of the game, written for new players.
Name    HP   MP
Slime   10   5
Dracky  15   0
Everything after the table is prose again.
## Notes
Monsters get stronger near the castle.
"""

META = {
    "source_url": "https://example.com/monsters",
    "title": "モンスター図鑑",
    "crawled_at": "2026-02-09T00:00:00+00:00",
}


def _rows(text: str, size: int = 200, overlap: int = 30) -> list[tuple[str, str, str]]:
    return [
        (c.content_type.value, c.heading_path, c.text)
        for c in structured_chunks(text, size, overlap)
    ]


def test_japanese_page_is_routed_in_document_order() -> None:
    assert _rows(JA_PAGE) == [
        ("prose", "", "モンスター図鑑へようこそ。このページでは敵の強さをまとめている。"),
        ("heading", "モンスター図鑑 > ボス", "## ボス\nボスは城の奥にいる。"),
        (
            "table",
            "モンスター図鑑 > ボス",
            "名前: りゅうおう\nHP: 90, MP: 75, 攻撃力: 100",
        ),
        ("table", "モンスター図鑑 > ボス", "名前: ハーゴン\nHP: 80, MP: 200, 攻撃力: 60"),
        ("heading", "モンスター図鑑 > ボス", "## ボス\nボスは手強い。"),
        ("heading", "モンスター図鑑 > ザコ", "## ザコ\nスライムは弱い。ドラキーも弱い。"),
        ("heading", "モンスター図鑑 > ザコ > 補足", "### 補足"),
        ("heading", "モンスター図鑑 > ザコ > 呪文", "### 呪文\nホイミで回復できる。"),
    ]


def test_english_table_inside_prose_section_without_blank_lines() -> None:
    assert _rows(EN_PAGE) == [
        (
            "heading",
            "Bestiary",
            "# Bestiary\nAn introduction to the monsters of the game, written for new players.",
        ),
        ("table", "Bestiary", "Name: Slime\nHP: 10, MP: 5"),
        ("table", "Bestiary", "Name: Dracky\nHP: 15, MP: 0"),
        ("heading", "Bestiary", "# Bestiary\nEverything after the table is prose again."),
        ("heading", "Bestiary > Notes", "## Notes\nMonsters get stronger near the castle."),
    ]


def test_caption_paragraph_above_a_table_goes_into_heading_path() -> None:
    """The crawler writes `<caption>` as its own paragraph right above the pipe table."""
    text = (
        "## Bosses\n\nBoss stats\n\n| Name | HP |\n| --- | --- |\n| Dragonlord | 90 |\n\n"
        "These bosses are tough.\n\n| Name | HP |\n| --- | --- |\n| Slime | 10 |"
    )
    rows = [
        (c.heading_path, c.text) for c in structured_chunks(text) if c.content_type.value == "table"
    ]
    assert rows == [
        ("Bosses > Boss stats", "Name: Dragonlord\nHP: 90"),
        ("Bosses", "Name: Slime\nHP: 10"),  # a sentence is not a caption
    ]


def test_small_table_in_a_long_prose_section_is_still_found() -> None:
    prose = "\n".join(f"説明の文その{i}です。" for i in range(30))
    text = f"{prose}\n\n名前  HP  MP\nりゅうおう  90  75\n\n{prose}"
    kinds = [c.content_type.value for c in structured_chunks(text, 200, 30)]
    assert kinds.count("table") == 1
    assert "名前: りゅうおう\nHP: 90, MP: 75" in [c.text for c in structured_chunks(text)]


def test_fenced_code_is_never_a_table_or_heading() -> None:
    text = "# Code\n```\n| a | b |\n|---|---|\n| 1 | 2 |\n# not a heading\n```"
    blocks = split_blocks(text.split("\n", 1)[1])
    assert len(blocks) == 1 and not isinstance(blocks[0], Table)
    assert {c.content_type.value for c in structured_chunks(text)} == {"code"}


def test_nodes_carry_document_metadata_and_continuous_chunk_index() -> None:
    doc = Document(text=JA_PAGE, metadata=META)
    nodes = StructuredNodeParser().get_nodes_from_documents([doc])
    assert [n.metadata["chunk_index"] for n in nodes] == list(range(len(nodes)))
    assert [n.get_content() for n in nodes] == [c[2] for c in _rows(JA_PAGE)]
    for node in nodes:
        assert {k: node.metadata[k] for k in META} == META
        assert isinstance(node.metadata["heading_path"], str)
        assert isinstance(node.metadata["heading_level"], int)
        assert node.metadata["content_type"] in {"prose", "table", "heading"}
        context = {"title", "heading_path"}
        embedded = set() if node.metadata["content_type"] == "table" else context
        assert set(node.excluded_embed_metadata_keys) == set(node.metadata) - embedded
        assert set(node.excluded_llm_metadata_keys) == set(node.metadata) - context
        if node.metadata["content_type"] == "table":
            assert node.get_content(MetadataMode.EMBED) == node.get_content()
        else:
            assert node.get_content(MetadataMode.EMBED).endswith("\n" + node.get_content())
        assert node.ref_doc_id == doc.doc_id
        assert node.get_content().strip()
    table_row = nodes[2].metadata
    assert (table_row["entity_name"], table_row["heading_level"]) == ("りゅうおう", 2)
    assert nodes[0].metadata["heading_level"] == 0


def test_each_document_is_numbered_from_zero() -> None:
    docs = [Document(text=JA_PAGE, metadata=META), Document(text=EN_PAGE, metadata={"a": 1})]
    nodes = StructuredNodeParser().get_nodes_from_documents(docs)
    by_doc: dict[str, list[int]] = {}
    for node in nodes:
        by_doc.setdefault(node.ref_doc_id or "", []).append(node.metadata["chunk_index"])
    assert by_doc == {docs[0].doc_id: list(range(8)), docs[1].doc_id: list(range(5))}


def test_empty_document_gives_no_nodes() -> None:
    assert StructuredNodeParser().get_nodes_from_documents([Document(text="  \n\n ")]) == []


def test_size_limit_holds_except_for_unsplittable_table_rows() -> None:
    body = "".join(f"長い本文の文その{i}です。" for i in range(80))
    row = "| りゅうおう | " + "竜" * 120 + " |"
    text = f"前書き。{body}\n\n# 見出し\n{body}\n\n| 名前 | 説明 |\n|---|---|\n{row}"
    chunks = structured_chunks(text, 100, 20)
    for chunk in chunks:
        if chunk.content_type.value == "table":
            continue
        assert len(chunk.text) <= 100, chunk.text
    (table,) = [c for c in chunks if c.content_type.value == "table"]
    assert len(table.text) > 100  # one header+value pair cannot be split (documented rule)


def test_output_is_deterministic() -> None:
    first = structured_chunks(JA_PAGE + EN_PAGE, 80, 20)
    second = structured_chunks(JA_PAGE + EN_PAGE, 80, 20)
    assert first == second
    assert [c.metadata(i) for i, c in enumerate(first)] == [
        c.metadata(i) for i, c in enumerate(second)
    ]


def test_from_settings_uses_chunk_settings() -> None:
    parser = StructuredNodeParser.from_settings(
        load_settings(rag_chunk_size=120, rag_chunk_overlap=15)
    )
    assert (parser.chunk_size, parser.chunk_overlap) == (120, 15)
    default = StructuredNodeParser.from_settings(load_settings())
    assert (default.chunk_size, default.chunk_overlap) == (200, 30)


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="chunk_overlap"):
        StructuredNodeParser(50, 50)


def test_works_as_an_ingestion_pipeline_transformation() -> None:
    doc = Document(text=EN_PAGE, metadata={"source_url": "https://example.com/en"})
    nodes = IngestionPipeline(transformations=[StructuredNodeParser()]).run(documents=[doc])
    assert [n.get_content() for n in nodes] == [c[2] for c in _rows(EN_PAGE)]


def test_chroma_accepts_every_node_metadata() -> None:
    doc = Document(text=JA_PAGE + "\n" + EN_PAGE, metadata=META)
    nodes = StructuredNodeParser().get_nodes_from_documents([doc])
    collection = chromadb.EphemeralClient().get_or_create_collection("parsing_router_test")
    collection.add(
        ids=[n.node_id for n in nodes],
        documents=[n.get_content() for n in nodes],
        metadatas=[n.metadata for n in nodes],
        embeddings=[[float(i), 1.0] for i in range(len(nodes))],
    )
    stored = collection.get(where={"content_type": "table"}, include=["metadatas"])
    names = sorted(str(m["entity_name"]) for m in stored["metadatas"] or [])
    assert names == ["Dracky", "Slime", "りゅうおう", "ハーゴン"]


PIECES = [
    "竜王の城。",
    "Hello there. ",
    "\n",
    "\n\n",
    "# ",
    "## ",
    "<h2>見出し</h2>",
    "| a | b |\n",
    "|---|---|\n",
    "名前  HP  MP\n",
    "りゅうおう 90 75 100\n",
    "```\n",
    "\t",
    "  ",
    "、",
    "漢" * 150,
]


@pytest.mark.parametrize("seed", range(3))
def test_random_documents_keep_the_invariants(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(150):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 60)))
        size, overlap = rng.choice([(40, 10), (100, 30), (200, 0)])
        chunks = structured_chunks(text, size, overlap)
        for chunk in chunks:
            assert chunk.text and chunk.text == chunk.text.strip(), repr(text)
            if chunk.content_type.value == "code":  # whole up to the code block limit
                assert len(chunk.text) <= max(size, CODE_BLOCK_CHARS), repr(text)
            elif chunk.content_type.value != "table":
                assert len(chunk.text) <= size, repr(text)
        assert chunks == structured_chunks(text, size, overlap)


def test_huge_document_title_is_capped_on_every_node() -> None:
    doc = Document(text=JA_PAGE, metadata={**META, "title": "題" * 100_000})
    nodes = StructuredNodeParser().get_nodes_from_documents([doc])
    assert nodes and all(n.metadata["title"] == "題" * 199 + "…" for n in nodes)


def test_many_prose_paragraphs_are_joined_in_linear_time() -> None:
    started = time.perf_counter()
    chunks = structured_chunks("段落。\n\n" * 60_000)  # ~600 KB of tiny paragraphs
    assert len(chunks) > 1000 and time.perf_counter() - started < 10
