"""A fast deterministic embedder for storage benchmarks (no model): each lower-cased word adds a signed unit to one
of 384 dimensions chosen by its CRC-32, and the sum is normalised. Texts that share words are near; it measures
storage, not retrieval quality. Imports nothing from the kit, so a worker of any kit version can load it."""

from __future__ import annotations

import re
import time
import zlib

import numpy as np
from langchain_core.embeddings import Embeddings

DIM = 384
_WORD = re.compile(r"\w+")


class HashEmbeddings(Embeddings):
    """Bag-of-words hashed into ``DIM`` dimensions; ``seconds`` accumulates the time spent embedding."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.texts = 0

    def _one(self, text: str) -> list[float]:
        vec = np.zeros(DIM, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            h = zlib.crc32(word.encode())
            vec[h % DIM] += 1.0 if h & 0x80000000 else -1.0
        norm = float(np.linalg.norm(vec))
        return (vec / norm if norm else vec).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed texts."""
        start = time.perf_counter()
        out = [self._one(t) for t in texts]
        self.seconds += time.perf_counter() - start
        self.texts += len(texts)
        return out

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        return self.embed_documents([text])[0]
