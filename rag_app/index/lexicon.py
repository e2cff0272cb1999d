"""Whether a word is an English word, by a maintained frequency list.

The no-match rule tells a name (`hashlib`, `tkinter`, a product) from a word of the
language: a question naming something the store never mentions is about something it
does not document, while a paraphrase's new word (`clobbering`, `piling`) is not. The
list is pyspellchecker's English dictionary (about 160,000 words, shipped in its wheel,
read once on first use in ~0.1 s); wordfreq holds the same knowledge in a 57 MB wheel.
"""

from __future__ import annotations

import functools
import threading

_lock = threading.Lock()


@functools.cache
def _english() -> frozenset[str]:
    from spellchecker import SpellChecker

    with _lock:
        return frozenset(SpellChecker(language="en", distance=1).word_frequency.dictionary)


def is_english_word(word: str) -> bool:
    """`word` (lower case) is a word of English, not a name."""
    return word in _english()


__all__ = ["is_english_word"]
