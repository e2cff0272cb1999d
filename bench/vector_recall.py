"""How far Chroma's HNSW top-k is from exact search, by `ef_search` (run by hand, not a test).

    python bench/vector_recall.py [--sizes 10000,100000] [--queries 300]
                                  [--ef 100,200,400,800] [--k 30] [--out DIR]

Data are real embeddings: a base of JSQuAD passage chunks (whole passages plus single
sentences of the longer ones, `--base` of them) embedded with the builtin model through
the evaluation's SQLite cache (`.tmp/embedding-cache.sqlite`); each size is reached by
adding near-duplicates of base vectors (base + Gaussian noise, renormalised, with a
per-vector noise scale chosen so that cos(near-duplicate, base) spans `--cos`, default
0.97-0.995): near-identical rows such as table lines, the hard case for a graph index.
Queries are real query embeddings of JSQuAD questions (spread over the file).

Each size gets a persisted Chroma collection in a temporary directory, created as the
project creates its chunk collection (`configuration={"hnsw": {"space": "cosine"}}`).
Ground truth is exact cosine top-k in numpy (float64). For every `ef_search` the
collection's configuration is changed with `collection.modify(configuration=...)` and
two fresh processes open the persisted collection and run every query: the first one's
results and latencies are reported, the second one's top-10 lists are compared with the
first (cross-process determinism). A fresh process is needed because, in chromadb 1.5.9,
`modify` persists the new ef_search but an already loaded HNSW index keeps the old one
(the script checks this too, in-process, and reports it). Exact numpy search over the
same float32 matrix, one query at a time, is timed as the alternative.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

COLLECTION = "bench_chunks"
WARMUP = 20
HNSW_KEYS = ("space", "ef_construction", "max_neighbors", "ef_search")
TOP = 10  # the list compared for "same order" and across processes


# --- data -------------------------------------------------------------------------
def base_texts(documents: list[Any], n_base: int) -> list[str]:
    """All passages, then single sentences of multi-sentence passages, up to `n_base`."""
    passages = list(dict.fromkeys(d.text for d in documents))
    seen = set(passages)
    sentences: list[str] = []
    for text in passages:
        parts = [s.strip() + "。" for s in text.split("。") if s.strip()]
        if len(parts) < 2:
            continue
        for s in parts:
            if len(s) >= 15 and s not in seen:
                seen.add(s)
                sentences.append(s)
    if n_base <= len(passages):
        return passages[:n_base]
    want = min(n_base - len(passages), len(sentences))
    picked = [sentences[i * len(sentences) // want] for i in range(want)] if want else []
    return passages + picked


def embed_real(n_base: int, n_queries: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(base vectors, query vectors, info) from JSQuAD with the builtin model, cached."""
    from eval.datasets import find_jsquad_dir, load_jsquad
    from eval.embedding_cache import CachedEmbedding
    from rag_app.embedding.builtin import BuiltinE5Embedding

    folder = find_jsquad_dir()
    if folder is None:
        sys.exit("JSQuAD not found: set RAG_EVAL_DATA_DIR or put it in ../shared/eval-data/")
    documents, queries = load_jsquad(folder, n_queries)
    texts = base_texts(documents, n_base)
    embed = CachedEmbedding(BuiltinE5Embedding(), REPO / ".tmp" / "embedding-cache.sqlite")
    t0 = time.perf_counter()
    base = np.asarray(embed.get_text_embedding_batch(texts), dtype=np.float32)
    qvec = np.asarray([embed.get_query_embedding(q.query) for q in queries], dtype=np.float32)
    info = {
        "jsquad": str(folder),
        "base_texts": len(texts),
        "passages": len(dict.fromkeys(d.text for d in documents)),
        "queries": len(queries),
        "embed_s": time.perf_counter() - t0,
        "cache_hits": embed.hits,
        "cache_misses": embed.misses,
    }
    embed.close()
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    qvec /= np.linalg.norm(qvec, axis=1, keepdims=True)
    return base, qvec, info


def sigma_for_cos(cos: float, dim: int) -> float:
    """Per-dimension noise sd giving E[cos(v + noise, v)] ~= cos for a unit v."""
    return float(np.sqrt((1.0 / cos**2 - 1.0) / dim))


def grow(base: np.ndarray, n: int, cos_lo: float, cos_hi: float, seed: int = 7):
    """`n` vectors: the base, then near-duplicates of base[i % len(base)]; ids; cos stats."""
    rng = np.random.default_rng(seed)
    n_base, dim = base.shape
    n_base = min(n_base, n)
    extra = n - n_base
    src = np.arange(extra) % n_base
    sig = rng.uniform(sigma_for_cos(cos_hi, dim), sigma_for_cos(cos_lo, dim), size=extra)
    dup = base[src] + rng.standard_normal((extra, dim)).astype(np.float32) * sig[:, None].astype(
        np.float32
    )
    dup /= np.linalg.norm(dup, axis=1, keepdims=True)
    cos = np.einsum("ij,ij->i", dup, base[src]) if extra else np.array([1.0])
    matrix = np.vstack([base[:n_base], dup]).astype(np.float32)
    ids = [f"b{i:05d}" for i in range(n_base)] + [f"d{i:06d}" for i in range(extra)]
    stats = {
        "sigma_lo": sigma_for_cos(cos_hi, dim),
        "sigma_hi": sigma_for_cos(cos_lo, dim),
        "cos_min": float(cos.min()),
        "cos_p5": float(np.percentile(cos, 5)),
        "cos_median": float(np.median(cos)),
        "cos_p95": float(np.percentile(cos, 95)),
        "cos_max": float(cos.max()),
        "dups_per_base": extra / n_base,
    }
    return matrix, ids, stats


def exact_topk(matrix: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact cosine top-k (indices, cosine distances) in float64, by blocks of queries."""
    m64 = matrix.astype(np.float64)
    idx_out, dist_out = [], []
    for start in range(0, len(queries), 50):
        sims = queries[start : start + 50].astype(np.float64) @ m64.T
        part = np.argpartition(-sims, k, axis=1)[:, :k]
        order = np.take_along_axis(sims, part, axis=1).argsort(axis=1)[:, ::-1]
        top = np.take_along_axis(part, order, axis=1)
        idx_out.append(top)
        dist_out.append(1.0 - np.take_along_axis(sims, top, axis=1))
    return np.vstack(idx_out), np.vstack(dist_out)


def numpy_bruteforce(matrix: np.ndarray, queries: np.ndarray, k: int) -> dict[str, Any]:
    """Exact float32 search one query at a time: latency, memory, agreement with float64."""
    times, tops = [], []
    for i, q in enumerate(np.vstack([queries[:WARMUP], queries])):
        t0 = time.perf_counter()
        sims = matrix @ q
        part = np.argpartition(-sims, k)[:k]
        top = part[np.argsort(-sims[part])]
        dt = (time.perf_counter() - t0) * 1000
        if i >= WARMUP:
            times.append(dt)
            tops.append(top)
    return {"times": times, "tops": np.array(tops), "mb": matrix.nbytes / 2**20}


# --- chroma -----------------------------------------------------------------------
def build_collection(path: str, matrix: np.ndarray, ids: list[str], build: dict[str, int]) -> float:
    """The project's configuration (cosine), plus any construction parameter in `build`."""
    import chromadb

    client = chromadb.PersistentClient(path=path)
    hnsw: dict[str, Any] = {"space": "cosine", **build}
    col = client.create_collection(
        COLLECTION, configuration={"hnsw": hnsw}, embedding_function=None
    )
    batch = min(5000, client.get_max_batch_size())
    t0 = time.perf_counter()
    for start in range(0, len(ids), batch):
        col.add(ids=ids[start : start + batch], embeddings=matrix[start : start + batch])
    return time.perf_counter() - t0


def close_clients() -> None:
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()


def set_ef(path: str, ef: int) -> int:
    """Persist ef_search on the collection; returns what the configuration now says."""
    import chromadb

    col = chromadb.PersistentClient(path=path).get_collection(COLLECTION)
    col.modify(configuration={"hnsw": {"ef_search": ef}})
    now = int(col.configuration["hnsw"]["ef_search"])
    close_clients()
    return now


def in_process_modify_check(path: str, queries: np.ndarray, k: int, ef_hi: int) -> dict[str, Any]:
    """Does `modify(ef_search)` change results/latency of an index already loaded here?"""
    import chromadb

    col = chromadb.PersistentClient(path=path).get_collection(COLLECTION)

    def run() -> tuple[list[list[str]], float]:
        out, times = [], []
        for q in queries:
            t0 = time.perf_counter()
            res = col.query(query_embeddings=[q], n_results=k, include=["distances"])
            times.append((time.perf_counter() - t0) * 1000)
            out.append(res["ids"][0])
        return out, float(np.median(times))

    run()  # load + warm
    before, p50_before = run()
    col.modify(configuration={"hnsw": {"ef_search": ef_hi}})
    after, p50_after = run()
    col.modify(configuration={"hnsw": {"ef_search": 100}})
    close_clients()
    return {
        "ef_after": ef_hi,
        "changed_lists": sum(a != b for a, b in zip(before, after, strict=True)),
        "n": len(before),
        "p50_before": p50_before,
        "p50_after": p50_after,
    }


def worker(path: str, qfile: str, k: int, out: str) -> None:
    """Fresh process: open the persisted collection, run every query, dump ids/times."""
    import chromadb

    queries = np.load(qfile)
    col = chromadb.PersistentClient(path=path).get_collection(COLLECTION)
    ef = col.configuration["hnsw"]["ef_search"]
    t0 = time.perf_counter()
    col.query(query_embeddings=[queries[0]], n_results=k, include=["distances"])
    first_ms = (time.perf_counter() - t0) * 1000
    for q in queries[:WARMUP]:
        col.query(query_embeddings=[q], n_results=k, include=["distances"])
    ids, dists, times = [], [], []
    for q in queries:
        t0 = time.perf_counter()
        res = col.query(query_embeddings=[q], n_results=k, include=["distances"])
        times.append((time.perf_counter() - t0) * 1000)
        ids.append(res["ids"][0])
        dists.append([float(d) for d in res["distances"][0]])
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    data = {"ef": ef, "ids": ids, "dists": dists, "times": times, "rss_mb": rss}
    data["first_query_ms"] = first_ms
    data["hnsw"] = {key: col.configuration["hnsw"].get(key) for key in HNSW_KEYS}
    Path(out).write_text(json.dumps(data))


def run_worker(path: str, qfile: str, k: int, out: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", path, "--qfile", qfile, "--k", str(k)]
    subprocess.run([*cmd, "--wout", out], check=True)
    return json.loads(Path(out).read_text())


# --- metrics ----------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def compare(
    got: list[list[str]], got_d: list[list[float]], ex_ids: list[list[str]], ex_d: np.ndarray
) -> dict[str, float]:
    n = len(got)
    r10 = sum(len(set(g[:10]) & set(e[:10])) for g, e in zip(got, ex_ids, strict=True)) / (10 * n)
    r30 = sum(len(set(g) & set(e)) for g, e in zip(got, ex_ids, strict=True)) / (len(ex_ids[0]) * n)
    order = sum(g[:TOP] == e[:TOP] for g, e in zip(got, ex_ids, strict=True)) / n
    same_set = sum(set(g[:TOP]) == set(e[:TOP]) for g, e in zip(got, ex_ids, strict=True)) / n
    # tie-tolerant: the returned top-10 distances equal the exact ones (swaps of ties ok)
    tol = sum(
        len(gd) >= TOP and np.allclose(gd[:TOP], ed[:TOP], atol=1e-5)
        for gd, ed in zip(got_d, ex_d, strict=True)
    )
    return {"r10": r10, "r30": r30, "order": order, "same_set": same_set, "dist_eq": tol / n}


def bench_size(
    n: int,
    base: np.ndarray,
    queries: np.ndarray,
    efs: list[int],
    k: int,
    cos_range: tuple[float, float],
    tmp_root: str,
    build: dict[str, int],
) -> dict[str, Any]:
    wall0 = time.perf_counter()
    matrix, ids, noise = grow(base, n, *cos_range)
    ex_idx, ex_d = exact_topk(matrix, queries, k)
    ex_ids = [[ids[j] for j in row] for row in ex_idx]
    brute = numpy_bruteforce(matrix, queries, k)
    f32_vs_f64 = sum(
        list(b[:TOP]) != list(e[:TOP]) for b, e in zip(brute["tops"], ex_idx, strict=True)
    )
    with tempfile.TemporaryDirectory(dir=tmp_root) as tmp:
        path = f"{tmp}/chroma"
        build_s = build_collection(path, matrix, ids, build)
        close_clients()
        disk_mb = sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) / 2**20
        print(f"  {n:,}: built in {build_s:.1f}s ({disk_mb:.0f} MB on disk)", flush=True)
        check = in_process_modify_check(path, queries[:100], k, max(efs))
        qfile = f"{tmp}/queries.npy"
        np.save(qfile, queries)
        rows = []
        for ef in efs:
            persisted = set_ef(path, ef)
            a = run_worker(path, qfile, k, f"{tmp}/a.json")
            b = run_worker(path, qfile, k, f"{tmp}/b.json")
            row = compare(a["ids"], a["dists"], ex_ids, ex_d)
            row.update(
                ef=ef,
                persisted=persisted,
                seen=a["ef"],
                p50=pct(a["times"], 50),
                p95=pct(a["times"], 95),
                first_ms=a["first_query_ms"],
                hnsw=a["hnsw"],
                rss=a["rss_mb"],
                xproc=sum(x[:TOP] != y[:TOP] for x, y in zip(a["ids"], b["ids"], strict=True)),
                xproc_p50=pct(b["times"], 50),
            )
            rows.append(row)
            print(
                f"  ef={ef}: r@10 {row['r10']:.4f} r@30 {row['r30']:.4f} "
                f"order {row['order']:.3f} p50 {row['p50']:.2f}ms "
                f"cross-process diffs {row['xproc']}",
                flush=True,
            )
    ref = next((r for r in rows if r["ef"] == 100), rows[0])
    for r in rows:
        r["ratio50"] = r["p50"] / ref["p50"]
        r["ratio95"] = r["p95"] / ref["p95"]
    return {
        "n": n,
        "k": k,
        "rows": rows,
        "noise": noise,
        "build_s": build_s,
        "disk_mb": disk_mb,
        "check": check,
        "brute_p50": pct(brute["times"], 50),
        "brute_p95": pct(brute["times"], 95),
        "brute_mb": brute["mb"],
        "brute_ratio50": pct(brute["times"], 50) / ref["p50"],
        "f32_vs_f64": f32_vs_f64,
        "wall_s": time.perf_counter() - wall0,
        "n_queries": len(queries),
    }


def markdown(res: dict[str, Any]) -> str:
    n, q, k = res["n"], res["n_queries"], res["k"]
    nz = res["noise"]
    lines = [
        f"### {n:,} chunks ({q} queries, k={k})",
        "",
        f"| ef_search | recall@10 | recall@{k} | top-10 same order | top-10 same set | "
        "top-10 same distances | p50 ms | p95 ms | p50 / ef=100 | p95 / ef=100 | "
        f"cross-process top-10 differences (of {q}) | worker peak RSS MB |",
        "|" + "---|" * 12,
    ]
    for r in res["rows"]:
        lines.append(
            f"| {r['ef']} | {r['r10']:.4f} | {r['r30']:.4f} | {r['order']:.3f} | "
            f"{r['same_set']:.3f} | {r['dist_eq']:.3f} | {r['p50']:.2f} | {r['p95']:.2f} | "
            f"{r['ratio50']:.2f} | {r['ratio95']:.2f} | {r['xproc']} | {r['rss']:.0f} |"
        )
    lines.append(
        f"| numpy exact (float32, 1 query) | 1 | 1 | - | - | - | {res['brute_p50']:.2f} | "
        f"{res['brute_p95']:.2f} | {res['brute_ratio50']:.2f} | - | 0 | "
        f"matrix {res['brute_mb']:.1f} MB |"
    )
    c = res["check"]
    lines += [
        "",
        f"- near-duplicates: {nz['dups_per_base']:.1f} per base vector, noise sd per "
        f"dimension uniform in [{nz['sigma_lo']:.5f}, {nz['sigma_hi']:.5f}]; cos to base "
        f"min {nz['cos_min']:.4f}, p5 {nz['cos_p5']:.4f}, median {nz['cos_median']:.4f}, "
        f"p95 {nz['cos_p95']:.4f}, max {nz['cos_max']:.4f}",
        f"- chroma build (add, batches of 5000): {res['build_s']:.1f}s, "
        f"{res['disk_mb']:.0f} MB on disk; wall time for this size {res['wall_s']:.0f}s",
        "- ef_search as persisted / as seen by the worker: "
        + ", ".join(f"{r['persisted']}/{r['seen']}" for r in res["rows"]),
        f"- in-process check: after `modify(ef_search={c['ef_after']})` on the open client, "
        f"{c['changed_lists']} of {c['n']} top-{k} lists changed "
        f"(p50 {c['p50_before']:.2f} -> {c['p50_after']:.2f} ms)",
        f"- numpy float32 one-query top-10 vs float64 ground truth: "
        f"{res['f32_vs_f64']} of {q} lists differ",
        f"- HNSW configuration seen by the last worker: {res['rows'][-1]['hnsw']}",
        "- first query after opening (index load), per ef: "
        + ", ".join(f"{r['first_ms']:.0f} ms" for r in res["rows"]),
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--ef", default="100,200,400,800")
    ap.add_argument("--k", type=int, default=30)
    ap.add_argument("--base", type=int, default=3000, help="real base chunks to embed")
    ap.add_argument("--cos", default="0.97,0.995", help="near-duplicate cos range to base")
    ap.add_argument("--ef-construction", type=int, help="default: chromadb's (100)")
    ap.add_argument("--max-neighbors", type=int, help="default: chromadb's (16)")
    ap.add_argument("--out", default=str(REPO / ".tmp" / "vector-recall"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--qfile", help=argparse.SUPPRESS)
    ap.add_argument("--wout", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.qfile, args.k, args.wout)
        return

    t_all = time.perf_counter()
    efs = [int(x) for x in args.ef.split(",")]
    build = {"ef_construction": args.ef_construction, "max_neighbors": args.max_neighbors}
    build = {key: value for key, value in build.items() if value is not None}
    lo, hi = (float(x) for x in args.cos.split(","))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"embedding {args.base} base chunks and {args.queries} queries ...", flush=True)
    base, queries, info = embed_real(args.base, args.queries)
    print(f"  {info}", flush=True)
    results = []
    for n in [int(x) for x in args.sizes.split(",")]:
        print(f"size {n:,} ...", flush=True)
        results.append(bench_size(n, base, queries, efs, args.k, (lo, hi), str(out), build))
    header = [
        "## Chroma HNSW top-k vs exact search",
        "",
        f"`{' '.join(['python', *sys.argv])}`",
        "",
        f"- chromadb {__import__('chromadb').__version__}, numpy {np.__version__}, "
        f"{os.cpu_count()} CPUs; base: {info['base_texts']} real JSQuAD chunks "
        f"({info['passages']} passages + sentences) embedded with the builtin model "
        f"(cache hits {info['cache_hits']}, misses {info['cache_misses']}, "
        f"{info['embed_s']:.0f}s); queries: {info['queries']} JSQuAD questions",
        f"- HNSW construction: {build or 'chromadb defaults (ef_construction 100, M 16)'}",
        f"- total wall time {time.perf_counter() - t_all:.0f}s",
        "",
        "",
    ]
    text = "\n".join(header) + "\n\n".join(markdown(r) for r in results) + "\n"
    print()
    print(text)
    (out / "vector-recall.md").write_text(text)
    (out / "vector-recall.json").write_text(
        json.dumps({"info": info, "results": results}, indent=1, default=float)
    )


if __name__ == "__main__":
    main()
