"""The no-match rule: when a search has nothing that answers the query, say so.

A question about something the store never mentions still gets nearest neighbours, and
their absolute distances overlap those of answerable questions (docs/evaluation.md). A
search is declined when the vector side is weak and nothing lexical vouches for it:

- the best vector hit barely stands out from the store as a whole: the standard score of
  its cosine similarity against every chunk searched, minus sqrt(2 ln n), where the best
  of n unrelated chunks is expected to lie (`Spread.excess`, a query-performance
  predictor in the spirit of WIG and NQC), is below `RAG_NO_MATCH_CUTOFF`;
- the query holds a word that no stored chunk holds (`BM25Index.unseen_words`): a
  question about tkinter names tkinter;
- the best hit shares no rare term with the query (one at most `RARE_DF` chunks hold: a
  name, a row key, a code), and the best BM25 hit does not lead the second by
  `BM25_LEAD`: an exact lookup that BM25 answers is kept even when the words around the
  name are new to the store.

A query that names code (a dotted path such as `unittest.mock.patch`, a snake_case name,
a call `settimeout()`: `named_code`) none of which the store holds is declined whatever
the vector side says: documentation that never writes `patch` does not document
`unittest.mock.patch`, however close its neighbours about similar code are. A name counts
as held by its last parts (`BM25Index.unknown_code`: a query may qualify a name more or
less than the docs do), and one held name keeps the search (`my_tasks` beside
`asyncio.gather()` is the user's own).

It needs the similarity of every chunk, which the exact-search copy computes anyway
(`rag_app.index.exact_vectors.Spread`); a store above `RAG_EXACT_SEARCH_MAX_CHUNKS`, one
whose damaged vector index is being restored (`ChromaStore.restore_copy`), or a search by
BM25 alone, is never declined.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from rag_app.index.exact_vectors import Spread
from rag_app.index.tokenizer import code_names, normalize, stem

MIN_CHUNKS = 200
"""Below this many chunks searched the spread says too little to decline anything."""
RARE_DF = 3
"""A term held by at most this many chunks is specific enough to vouch for a hit
(measured in docs/evaluation.md: 1 and 2 lose more table lookups, 5 and 10 decline fewer
no-answer questions)."""
BM25_LEAD = 1.2
"""A best BM25 hit scoring this many times the second one is a lookup BM25 answered."""
_CALL = re.compile(r"(?<![a-z0-9_.])([a-z_][a-z0-9_]*)\(\)")
QUERY_SCAN_CHARS = 1000
"""Code names are looked for in the first this many characters of a query."""


def named_code(query: str) -> list[str]:
    """The code a query names, as BM25 terms: dotted paths and snake_case names
    (`tokenizer.code_names`) and names written as calls (`settimeout()`)."""
    norm = normalize(query[:QUERY_SCAN_CHARS])
    return list(dict.fromkeys([*code_names(norm), *map(stem, _CALL.findall(norm))]))


@dataclass
class Evidence:
    """What the rule looks at: `excess` of the best vector hit (None when not measured);
    the query's words no chunk holds, the rarest term the best hit shares with the query
    and how far the best BM25 hit leads the second (these three are looked up only when
    the excess alone would decline and the code the query names does not; None: not
    looked up)."""

    excess: float | None = None
    unseen: list[str] | None = None
    rarest_match: int | None = None
    bm25_lead: float | None = None
    code: list[str] | None = None
    """The code the query names (`named_code`; None when it names none or the vector
    side was not measured)."""
    unseen_code: list[str] | None = None
    """Those of `code` the store does not hold, judged by their last parts
    (`BM25Index.unknown_code`)."""

    def names_unknown_code(self) -> bool:
        """The query names code and the store holds none of it."""
        return bool(self.code) and len(self.unseen_code or ()) == len(self.code or ())

    def declines(self, cutoff: float | None) -> bool:
        """Whether the rule at `cutoff` says nothing answers the query (`cutoff` None:
        the rule is off). Evidence not looked up yet counts against the hits."""
        if cutoff is None or self.excess is None:
            return False
        if self.names_unknown_code():
            return True  # all the code it names is code the store never mentions
        if self.excess >= cutoff:
            return False
        if self.unseen is not None and not self.unseen:
            return False  # the store knows every word of the query
        if self.rarest_match is not None and self.rarest_match <= RARE_DF:
            return False  # the best hit shares a specific term with it
        return self.bm25_lead is None or self.bm25_lead < BM25_LEAD

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def excess_of(best_distance: float | None, spread: Spread | None) -> float | None:
    """The best vector hit's excess, when the spread is measured over enough chunks."""
    if best_distance is None or spread is None or spread.count < MIN_CHUNKS:
        return None
    excess = spread.excess(best_distance)
    return None if excess is None else round(excess, 4)


def bm25_lead(scores: list[float]) -> float | None:
    """The best BM25 score over the second best (99 when only one chunk matched)."""
    top = sorted(scores, reverse=True)[:2]
    if not top or top[0] <= 0:
        return None
    if len(top) == 1 or top[1] <= 0:
        return 99.0
    return round(min(top[0] / top[1], 99.0), 4)
