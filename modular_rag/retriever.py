"""The knowledge index as a LangChain retriever (:meth:`KnowledgeIndex.as_retriever
<modular_rag.index.KnowledgeIndex.as_retriever>`), for agents and chains that take a ``BaseRetriever``.

The retriever runs one of the kit's registered retrieval operators (``hybrid``: dense + BM25 fused; ``dense``;
``bm25``) on the index, with the operator's own params and metadata filters, so it ranks exactly as a flow's
``retrieve`` step with the same settings does::

    index = Providers(load_config("flow.yaml").providers).index
    retriever = index.as_retriever("hybrid", k=4, filter={"doc_type": "manual"}, fusion="rrf")
    docs = retriever.invoke("What does error E07 mean?")               # list[Document], best first
    docs = retriever.invoke("What does error E07 mean?", k=2, filter={"product": "e-bike"})   # per call

Each ``Document`` carries the chunk's metadata plus ``chunk_id``, ``score`` and ``channel`` (the ranking that
found it), and has ``id`` set to the chunk id.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr

from modular_rag import registry
from modular_rag.config import validate_params
from modular_rag.errors import ConfigError

if TYPE_CHECKING:
    from modular_rag.providers import Providers

__all__ = ["IndexRetriever"]


class IndexRetriever(BaseRetriever):
    """A :class:`~modular_rag.index.KnowledgeIndex` as a LangChain ``BaseRetriever``.

    Args:
        index: The knowledge index to search.
        search_type: A registered retrieval operator: ``hybrid`` (dense + BM25, fused), ``dense`` or ``bm25``.
        k: Documents returned (a call may ask for another number: ``invoke(query, k=2)``).
        filter: A Chroma-style ``where`` filter on chunk metadata (``{"doc_id": "x"}``, ``{"year": {"$gte": 2020}}``,
            ``$and``/``$or``); a call's own ``filter`` is combined with it (both must hold).
        params: The operator's other params (hybrid: ``pool``, ``fusion``, ``weights``, ``rrf_k``).

    Raises:
        ConfigError: If ``search_type`` is not a retrieval operator (the message lists them) or a param is invalid.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: Any
    search_type: str = "hybrid"
    k: int = Field(4, gt=0)
    filter: dict[str, Any] | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    _built: dict[int, Any] = PrivateAttr(default_factory=dict)

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        self._operator(self.k)  # an unknown search type or an invalid param fails here, not at the first query

    def _operator(self, k: int) -> Any:
        """The retrieval operator built for ``k`` results (built once per ``k``)."""
        if k not in self._built:
            names = [
                n
                for n in registry.operators_for(registry.Port.RETRIEVE)  # what searches the index
                if "no_search" not in registry.get_operator(registry.Port.RETRIEVE, n).tags
            ]
            if self.search_type not in names:
                raise ConfigError(
                    "search_type", f"no retrieval operator named {self.search_type!r}; search types: {', '.join(names)}"
                )
            info = registry.get_operator(registry.Port.RETRIEVE, self.search_type)
            params = validate_params(info.params, {**self.params, "k": k, "filter": self.filter}, "params")
            # what a retrieval operator reads of its providers: the index, and the vector store setting (none here, so
            # an index on a LangChain store the kit cannot list is refused bm25 and hybrid, as a flow's is)
            env = SimpleNamespace(index=self.index, config=SimpleNamespace(vectorstore=None))
            self._built[k] = info.factory(params, cast("Providers", env))
        return self._built[k]

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[Document]:
        """The chunks that best match ``query``, best first (``k`` and ``filter`` override the retriever's)."""
        state: dict[str, Any] = {"query": query}
        if filter:
            state["filter"] = dict(filter)
        hits = self._operator(k or self.k)(state)["candidates"]
        return [
            Document(
                page_content=h["text"],
                id=h["chunk_id"],
                metadata={**h["metadata"], "chunk_id": h["chunk_id"], "score": h["score"], "channel": h["channel"]},
            )
            for h in hits
        ]
