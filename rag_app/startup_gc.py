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


def started() -> None:
    """Call once the process is ready to serve: keep what start-up made out of every
    later collection, and collect from now on. Start-up's own garbage stays, frozen: a
    full collection first took 0.16 s at a 100k-chunk store's open and freed ~4,000
    objects."""
    gc.freeze()
    gc.enable()
