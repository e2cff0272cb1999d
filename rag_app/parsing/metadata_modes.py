"""What LlamaIndex shows of a chunk's metadata in each `MetadataMode`.

One rule, applied to every node the parsers make and every node read back from the
store, so the embedded text and the BM25 context are decided by LlamaIndex's own
`get_content(MetadataMode.EMBED)` / `get_metadata_str(MetadataMode.LLM)`:

- EMBED: page title and heading path, then the chunk text (measured on JSQuAD: a
  paragraph that never names its subject then matches questions about it, vector-only
  nDCG@10 +0.023). Table rows are embedded alone: a row is a self-describing record,
  and prefixing context pushed the りゅうおう row from rank 1 to rank 4.
- LLM: title and heading path (what a reader needs to place a chunk); BM25 indexes them
  as a context field of their own.
- Every other key (source URL, dates, scores, ids) stays out of both.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from llama_index.core.schema import BaseNode, MetadataMode, TransformComponent

CONTEXT_KEYS: tuple[str, ...] = ("title", "heading_path")
METADATA_TEMPLATE = "{value}"
METADATA_SEPARATOR = "\n"
TEXT_TEMPLATE = "{metadata_str}\n{content}"


def set_metadata_modes(nodes: Iterable[BaseNode], embed_context: bool = True) -> None:
    """Apply the rule above to each node (idempotent); `embed_context=False` embeds the
    chunk text alone (`RAG_EMBED_CONTEXT`, the evaluation's comparison)."""
    for node in nodes:
        keys = list(node.metadata)
        table = node.metadata.get("content_type") == "table"
        embedded = CONTEXT_KEYS if embed_context and not table else ()
        node.excluded_embed_metadata_keys = [k for k in keys if k not in embedded]
        node.excluded_llm_metadata_keys = [k for k in keys if k not in CONTEXT_KEYS]
        node.metadata_template = METADATA_TEMPLATE
        node.metadata_separator = METADATA_SEPARATOR
        node.text_template = TEXT_TEMPLATE


def follows_modes(node: BaseNode) -> bool:
    """Whether a node already carries these modes (stored by this version)."""
    return node.text_template == TEXT_TEMPLATE and node.metadata_template == METADATA_TEMPLATE


class ApplyMetadataModes(TransformComponent):
    """Ingestion step: set each node's metadata modes after the metadata is complete."""

    embed_context: bool = True

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        set_metadata_modes(nodes, self.embed_context)
        return nodes


def hide_keys(node: BaseNode, keys: Iterable[str]) -> None:
    """Keep metadata added after parsing (scores) out of the EMBED and LLM text."""
    keys = list(keys)
    node.excluded_embed_metadata_keys = [*node.excluded_embed_metadata_keys, *keys]
    node.excluded_llm_metadata_keys = [*node.excluded_llm_metadata_keys, *keys]


def context_text(node: BaseNode) -> str:
    """Title and heading path of a chunk, one per line (its LLM-mode metadata)."""
    return node.get_metadata_str(MetadataMode.LLM).strip()
