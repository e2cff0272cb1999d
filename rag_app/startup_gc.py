"""The cyclic garbage collector off while a long-running process starts.

Importing LlamaIndex, Chroma and the `mcp` SDK and opening a store create hundreds of
thousands of objects that live as long as the process; the collector walked them again
and again while they were being created (measured in README "Cold start"). `starting()`
turns it off; `started()` freezes what exists by then (never scanned again, as the store
service already did with its open index) and turns it back on.
"""

from __future__ import annotations

import gc


def starting() -> None:
    """Call first thing in a server's entry point."""
    gc.disable()


def started(collect: bool = False) -> None:
    """Call once the process is ready to serve: keep what start-up made out of every
    later collection, and collect from now on. `collect`: free start-up's own garbage
    first (it costs a full collection; without it that garbage stays, frozen)."""
    if collect:
        gc.collect()
    gc.freeze()
    gc.enable()
