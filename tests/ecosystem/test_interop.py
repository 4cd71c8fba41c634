"""LangChain objects in place of configured names: a ``BaseChatModel`` as ``providers.llm``, an ``Embeddings``
as ``providers.embeddings``, a ``VectorStore`` as ``providers.vectorstore``, a ``BaseRetriever`` in the
retrieve slot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from modular_rag import demo_corpus_path
from modular_rag.builder import build_flow
from modular_rag.config import ProvidersConfig
from modular_rag.ingest import index_paths
from modular_rag.providers import Providers
from tests.conftest import fake_llm, providers_config

QUESTION = "What does error code E07 mean on the e-bike display?"
ANSWER = "Error E07 means the speed sensor signal was lost [1]."


class KitEmbeddings(Embeddings):
    """LangChain ``Embeddings`` over the kit's bundled MiniLM encoder (the one the session already loaded)."""

    def __init__(self) -> None:
        self.encoder = Providers(ProvidersConfig()).encoder
        self.calls = 0
        self.query_calls = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return self.encoder.encode(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        self.calls += 1
        self.query_calls += 1
        return self.encoder.encode([text])[0].tolist()  # type: ignore[no-any-return]


def linear(providers: ProvidersConfig, **operators: Any) -> dict[str, Any]:
    return {
        "pattern": "linear",
        "providers": providers,
        "operators": {"retrieve": {"name": "hybrid", "params": {"k": 5}}, **operators},
    }


def cited(out: dict[str, Any]) -> Sequence[str]:
    evidence = {e["ref"]: e for e in out["evidence"]}
    return [evidence[c["ref"]]["metadata"]["title"] for c in out["answer"]["citations"]]


@pytest.fixture(scope="module")
def embeddings(demo_dir: Path) -> KitEmbeddings:  # demo_dir: the session's encoder is loaded
    return KitEmbeddings()


@pytest.fixture(scope="module")
def store(embeddings: KitEmbeddings) -> InMemoryVectorStore:
    """An ``InMemoryVectorStore`` holding the demo corpus, indexed by the kit (the store embeds by itself)."""
    vectorstore = InMemoryVectorStore(embedding=embeddings)
    summary = index_paths([demo_corpus_path()], Providers(ProvidersConfig(vectorstore=vectorstore)), progress=False)
    assert summary.files_indexed == 36 and len(vectorstore.store) == summary.index_chunks
    return vectorstore


@pytest.mark.integration
def test_a_chat_model_object(demo_dir: Path) -> None:
    llm = fake_llm(ANSWER)
    out = build_flow(linear(providers_config(demo_dir, llm))).invoke({"query": QUESTION})
    assert out["answer"]["text"] == ANSWER and cited(out) == ["E-bike display error E07"]
    assert [(e["node"], e["llm_calls"]) for e in out["ledger"]] == [
        ("retrieve", 0),
        ("context", 0),
        ("generate", 1),
    ]


@pytest.mark.integration
def test_a_chat_openai_object_keeps_token_logprobs(demo_env: Providers) -> None:
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(model="smollm2", base_url=demo_env.llm.model.openai_api_base, api_key="no-key", max_tokens=8)
    llm = Providers(ProvidersConfig(llm=model)).llm
    assert llm.openai_compatible and llm.describe == "ChatOpenAI"
    completion = llm.complete("Name a colour.", max_tokens=6, logprobs=True)
    assert completion.text.strip() and completion.tokens


@pytest.mark.integration
def test_an_embeddings_object(embeddings: KitEmbeddings, tmp_path: Path) -> None:
    providers = ProvidersConfig.model_validate(
        {
            "embeddings": embeddings,
            "llm": fake_llm(ANSWER),
            "vectorstore": {
                "name": "chroma",
                "path": str(tmp_path / "chroma"),
                "collection": "langchain-embeddings",
            },
        }
    )
    env = Providers(providers)
    summary = index_paths([demo_corpus_path()], env, progress=False)
    assert summary.files_indexed == 36 and env.index.count() == summary.index_chunks
    before = embeddings.query_calls
    for retrieve in ("dense", "hybrid"):
        out = build_flow(linear(providers, retrieve=retrieve), providers=env).invoke({"query": QUESTION})
        assert out["candidates"][0]["metadata"]["title"] == "E-bike display error E07"
        assert out["answer"]["text"] == ANSWER and cited(out) == ["E-bike display error E07"]
    assert embeddings.query_calls == before + 1  # the question is embedded once, through embed_query, then cached


@pytest.mark.integration
@pytest.mark.parametrize("retrieve", ["dense", "hybrid", "bm25"])
def test_a_vector_store_object(store: InMemoryVectorStore, retrieve: str) -> None:
    env = Providers(ProvidersConfig(vectorstore=store, llm=fake_llm(ANSWER)))
    flow = build_flow(linear(env.config, retrieve=retrieve), providers=env)
    out = flow.invoke({"query": QUESTION})
    top = out["candidates"][0]
    assert top["metadata"]["title"] == "E-bike display error E07" and top["chunk_id"] in store.store
    assert out["answer"]["text"] == ANSWER and cited(out) == ["E-bike display error E07"]
    # the kit's Chroma-style filter works on the store too (InMemoryVectorStore filters by predicate)
    filtered = flow.invoke({"query": QUESTION, "filter": {"source": {"$ne": "faq"}}})
    assert filtered["candidates"] and all(c["metadata"]["source"] != "faq" for c in filtered["candidates"])


@pytest.mark.integration
def test_a_retriever_object(store: InMemoryVectorStore, demo_dir: Path) -> None:
    retriever = store.as_retriever(search_kwargs={"k": 4})
    config = linear(providers_config(demo_dir, fake_llm(ANSWER)), retrieve=retriever)
    out = build_flow(config).invoke({"query": QUESTION})
    assert [c["channel"] for c in out["candidates"]] == ["VectorStoreRetriever"] * 4
    assert out["candidates"][0]["metadata"]["title"] == "E-bike display error E07"
    assert out["candidates"][0]["chunk_id"] in store.store  # the document ids the store gave back
    assert out["answer"]["text"] == ANSWER and cited(out) == ["E-bike display error E07"]
    assert out["ledger"][0]["operator"] == "<VectorStoreRetriever>" and out["ledger"][0]["retrievals"] == 1


@pytest.mark.integration
def test_a_vector_store_filled_elsewhere_refuses_what_needs_the_chunk_list(embeddings: KitEmbeddings) -> None:
    """A LangChain store opened on chunks another program wrote: the kit cannot list them, so BM25, hybrid and link
    hops are refused when the flow is built, naming the store and the alternatives; dense retrieval works."""
    from modular_rag.errors import ConfigError

    elsewhere = InMemoryVectorStore(embedding=embeddings)
    elsewhere.add_texts(
        ["Error E07 means speed sensor signal lost.", "Oil the chain every 300 km."],
        metadatas=[{"title": "E07"}, {"title": "Chain"}],
    )
    env = Providers(ProvidersConfig(vectorstore=elsewhere, llm=fake_llm(ANSWER)))
    for retrieve in ("bm25", "hybrid"):
        with pytest.raises(
            ConfigError,
            match=r"LangChain InMemoryVectorStore cannot list them .*\(vectorstore: "
            r"chroma or milvus\)",
        ):
            build_flow(linear(env.config, retrieve=retrieve), providers=env)
    hop = {
        **linear(env.config, retrieve="dense"),
        "operators": {"retrieve": "dense", "rerank": "link_hop", "generate": "none"},
    }
    with pytest.raises(ConfigError, match="link_hop"):
        build_flow(hop, providers=env)
    out = build_flow(linear(env.config, retrieve="dense"), providers=env).invoke({"query": QUESTION})
    assert out["candidates"][0]["text"].startswith("Error E07")
