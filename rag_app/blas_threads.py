"""One BLAS thread in the store service.

OpenBLAS's worker threads busy-wait for a while after every call. The exact vector search
makes one matrix-vector product per query, so with searches a few tens of ms apart those
workers spin all the time on a core the query embedding (OpenMP, the builtin model)
needs. Measured at 10k chunks in one session: with one BLAS thread a search took 28–32 ms
(p50) instead of 39 ms, the query embedding 21–23 ms instead of 31–32 ms, while the
product itself went from ~2.3 to ~3.1 ms. `threadpoolctl` sets it for whichever BLAS
numpy loaded.
"""

from __future__ import annotations

from threadpoolctl import threadpool_limits


def single_blas_thread() -> None:
    """Limit numpy's BLAS to one thread (process-wide; loads numpy first, since only
    libraries already loaded can be limited)."""
    import numpy  # noqa: F401

    threadpool_limits(1, user_api="blas")
