"""The server's gallery features: `dimensions` (Matryoshka), `serve --dim`, `POST /v1/search`
and `GET /metrics`, on loopback around the tiny checkpoint."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("prometheus_client")
pytest.importorskip("uvicorn")

from _serve_fixtures import RunningServer, binary_text_index  # noqa: E402
from vis_embed.gallery.store import GalleryIndex  # noqa: E402
from vis_embed.vectors.transforms import truncate  # noqa: E402
from vis_embed.serving.app import create_app  # noqa: E402
from vis_embed.serving.settings import ServerSettings  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.timeout(120)]

NAME, KEY = "tiny", "sesame"
TEXTS = ["a red car", "two people walking a dog", "blue", "the same woman from the side", "a yellow sign"]
AUTH = {"Authorization": f"Bearer {KEY}"}


class MatryoshkaEmbedder:
    """The embedder, but its config records matryoshka_dims (as a model trained with them would)."""

    def __init__(self, embedder: Any) -> None:
        self._embedder = embedder
        self.embedding_config = embedder.embedding_config.model_copy(update={"matryoshka_dims": [4, 8]})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)


@pytest.fixture(scope="module")
def index(embedder, tmp_path_factory) -> GalleryIndex:
    return binary_text_index(embedder, TEXTS, tmp_path_factory.mktemp("gallery"), rescore=5)


def _serve(embedder: Any, index: Any = None, **settings: Any) -> RunningServer:
    return RunningServer(create_app(embedder, ServerSettings(model_name=NAME, api_key=KEY, **settings), index))


@pytest.fixture(scope="module")
def served(embedder, index) -> Iterator[str]:
    running = _serve(MatryoshkaEmbedder(embedder), index)
    yield running.url
    running.stop()


def _post(url: str, path: str, body: dict[str, Any], headers: dict[str, str] = AUTH) -> Any:
    return httpx.post(f"{url}{path}", json={"model": NAME, **body}, headers=headers, timeout=30)


def test_dimensions_cut_a_matryoshka_models_vectors(served, embedder) -> None:
    full = embedder.encode([{"text": TEXTS[0]}])
    response = _post(served, "/v1/embeddings", {"input": TEXTS[0], "dimensions": 8})
    assert response.status_code == 200, response.text
    np.testing.assert_allclose(response.json()["data"][0]["embedding"], truncate(full, 8)[0], atol=1e-5)
    for bad in (0, embedder.embedding_dim + 1):
        refused = _post(served, "/v1/embeddings", {"input": TEXTS[0], "dimensions": bad})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "dimensions"


def test_a_model_without_matryoshka_dims_refuses_other_dimensions_like_vllm(embedder) -> None:
    running = _serve(embedder)
    try:
        refused = _post(running.url, "/v1/embeddings", {"input": "x", "dimensions": 4})
        assert refused.status_code == 400 and "not trained with Matryoshka" in refused.json()["error"]["message"]
        assert refused.json()["error"]["param"] == "dimensions"
        full = _post(running.url, "/v1/embeddings", {"input": "x", "dimensions": embedder.embedding_dim})
        assert full.status_code == 200
    finally:
        running.stop()


def test_serve_dim_is_the_default_width(embedder) -> None:
    running = _serve(MatryoshkaEmbedder(embedder), dim=4)
    try:
        vector = _post(running.url, "/v1/embeddings", {"input": TEXTS[1]}).json()["data"][0]["embedding"]
        np.testing.assert_allclose(vector, truncate(embedder.encode([{"text": TEXTS[1]}]), 4)[0], atol=1e-5)
    finally:
        running.stop()


def test_search_finds_each_gallery_item_first(served) -> None:
    response = _post(served, "/v1/search", {"input": TEXTS, "k": 3, "instruction": None})
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert [row["hits"][0]["id"] for row in data] == [f"doc{i}" for i in range(5)]
    assert all(len(row["hits"]) == 3 for row in data) and data[0]["hits"][0]["score"] == pytest.approx(1, abs=1e-4)


@pytest.mark.parametrize("body, status, param", [
    ({"input": "x", "k": 0}, 400, "k"),
    ({"input": "x", "k": 1001}, 400, "k"),
    ({"input": "x", "dimensions": 4}, 400, "dimensions"),   # unknown field for search
    ({"input": []}, 400, "input"),
    ({"input": "x", "model": "other"}, 404, "model"),
])
def test_bad_search_requests_name_the_field(served, body, status, param) -> None:
    response = httpx.post(f"{served}/v1/search", json={"model": NAME, **body}, headers=AUTH, timeout=30)
    assert response.status_code == status and response.json()["error"]["param"] == param


def test_search_needs_the_key_and_an_index(served, embedder) -> None:
    assert _post(served, "/v1/search", {"input": "x"}, headers={}).status_code == 401
    running = _serve(embedder)
    try:
        assert _post(running.url, "/v1/search", {"input": "x"}).status_code == 404
    finally:
        running.stop()


def test_metrics_count_requests_items_batches_and_errors(embedder) -> None:
    running = _serve(embedder)
    try:
        assert httpx.get(f"{running.url}/metrics", timeout=10).status_code == 401
        _post(running.url, "/v1/embeddings", {"input": TEXTS[:3]})
        _post(running.url, "/v1/embeddings", {"input": "x", "dimensions": 3})  # 400
        response = httpx.get(f"{running.url}/metrics", headers=AUTH, timeout=10)
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
        text = response.text
    finally:
        running.stop()
    assert 'vis_embed_requests_total{code="200",endpoint="/v1/embeddings"} 1.0' in text
    assert 'vis_embed_requests_total{code="400",endpoint="/v1/embeddings"} 1.0' in text
    assert 'vis_embed_items_total{endpoint="/v1/embeddings"} 3.0' in text  # the refused one: no work
    assert "vis_embed_batch_items_count 1.0" in text and "vis_embed_batch_items_sum 3.0" in text
    assert 'vis_embed_request_seconds_count{endpoint="/v1/embeddings"} 2.0' in text
    assert "vis_embed_queue_depth 0.0" in text


def test_items_total_counts_only_items_that_reached_the_model_queue(embedder) -> None:
    """A request refused after parsing -- an undecodable image (400), over its token budget
    (413) -- is no accepted work: vis_embed_items_total counted its items all the same."""
    running = _serve(embedder, max_request_tokens=40)
    try:
        refused = [_post(running.url, "/v1/embeddings", {"input": [{"image": "data:image/png;base64,AAAA"}]}),
                   _post(running.url, "/v1/embeddings", {"input": ["a red car"] * 30})]
        assert [response.status_code for response in refused] == [400, 413], [r.text for r in refused]
        assert _post(running.url, "/v1/embeddings", {"input": TEXTS[:2]}).status_code == 200
        text = httpx.get(f"{running.url}/metrics", headers=AUTH, timeout=10).text
    finally:
        running.stop()
    assert 'vis_embed_items_total{endpoint="/v1/embeddings"} 2.0' in text, text


def test_search_ranks_as_vis_embed_search_does_with_the_recorded_query_instruction(tiny_checkpoint,
                                                                                   tmp_path) -> None:
    """POST /v1/search without `instruction` embeds a query as `vis-embed search` does: with the
    model's recorded query_instruction.  The same queries: the same hits, the same scores."""
    import json
    import shutil

    from vis_embed.cli import main
    from vis_embed.model.runtime.embedder import Embedder

    model = tmp_path / "model"
    shutil.copytree(tiny_checkpoint(), model)
    (model / "embedding_config.json").write_text(json.dumps({"query_instruction": "Find the caption's photo."}))
    gallery, queries = tmp_path / "gallery.jsonl", tmp_path / "queries.jsonl"
    gallery.write_text("".join(json.dumps({"id": f"doc{i}", "text": text}) + "\n" for i, text in enumerate(TEXTS)))
    asked = ["a red dog", "the woman", "a sign"]
    queries.write_text("".join(json.dumps({"text": text}) + "\n" for text in asked))
    assert main(["encode", "--model", str(model), "--input", str(gallery), "--output", str(tmp_path / "g.npy"),
                 "--no-progress"]) == 0
    assert main(["index", "--embeddings", str(tmp_path / "g.npy"), "--out", str(tmp_path / "idx"),
                 "--kind", "flat"]) == 0
    assert main(["search", "--model", str(model), "--index", str(tmp_path / "idx"), "--input", str(queries),
                 "--k", "3", "--output", str(tmp_path / "hits.jsonl"), "--no-progress"]) == 0
    by_cli = [json.loads(line)["hits"] for line in (tmp_path / "hits.jsonl").read_text().splitlines()]
    embedder = Embedder.from_pretrained(model, device="cpu", dtype="float32")
    running = RunningServer(create_app(embedder, ServerSettings(model_name=NAME),
                                       GalleryIndex.load(tmp_path / "idx")))
    try:
        response = httpx.post(f"{running.url}/v1/search", json={"model": NAME, "input": asked, "k": 3}, timeout=30)
    finally:
        running.stop()
    assert response.status_code == 200, response.text
    by_server = [row["hits"] for row in response.json()["data"]]
    assert [[hit["id"] for hit in hits] for hits in by_server] == [[hit["id"] for hit in hits] for hits in by_cli]
    np.testing.assert_allclose([[hit["score"] for hit in hits] for hits in by_server],
                               [[hit["score"] for hit in hits] for hits in by_cli], atol=1e-5)


def test_serve_rescore_sets_the_index_shortlist_as_search_does(index, monkeypatch, capsys) -> None:
    """`serve --index DIR --rescore K` loads the index with K (as `vis-embed search --rescore`);
    a bad K, or K without --index, is exit 2 before the model loads."""
    from vis_embed.cli import main
    from vis_embed.gallery import store
    from vis_embed.model.runtime.embedder import Embedder
    from vis_embed.serving import cli as serve_cli

    class ModelLoading(Exception):
        pass

    def no_model(*_args: Any, **_kwargs: Any) -> Any:
        raise ModelLoading

    loaded, load = [], store.GalleryIndex.load
    monkeypatch.setattr(serve_cli, "tune_malloc", lambda: None)  # leave this process's allocator alone
    monkeypatch.setattr(Embedder, "from_pretrained", no_model)
    monkeypatch.setattr(store.GalleryIndex, "load", lambda *a, **kw: loaded.append(load(*a, **kw)) or loaded[-1])
    serve = ["serve", "--model", "tiny", "--index", str(index.directory)]
    with pytest.raises(ModelLoading):
        main([*serve, "--rescore", "2"])
    assert loaded[-1].rescore == 2
    assert main([*serve, "--rescore", "-1"]) == 2
    assert "--rescore must be an integer >= 0" in capsys.readouterr().err
    assert main(["serve", "--model", "tiny", "--rescore", "2"]) == 2
    assert "--rescore re-ranks the shortlist of an --index" in capsys.readouterr().err
