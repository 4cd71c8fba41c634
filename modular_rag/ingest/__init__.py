"""Ingest: files and folders (or any LangChain loader's documents) into the knowledge index.

:mod:`~modular_rag.ingest.files` reads files into documents with the loader operators,
:mod:`~modular_rag.ingest.chunks` makes chunks of them, and :mod:`~modular_rag.ingest.pipeline` is the indexing run
(``modular-rag index``, :func:`index_paths`, :func:`index_documents`). The loaders and chunkers themselves are
operators (``operators/indexing.py``), found through the registry by name.
"""

from modular_rag.ingest.chunks import CHUNK_FORMAT, Chunker, make_chunks
from modular_rag.ingest.files import (
    LOADER_BY_SUFFIX,
    STREAMED,
    Document,
    FileReport,
    Loader,
    LoaderParams,
    chunk_id,
    iter_files,
    load_file,
    readable_title,
    stream_file,
)
from modular_rag.ingest.pipeline import IndexSummary, index_documents, index_paths

__all__ = [
    "CHUNK_FORMAT",
    "Chunker",
    "make_chunks",
    "LOADER_BY_SUFFIX",
    "STREAMED",
    "Document",
    "FileReport",
    "Loader",
    "LoaderParams",
    "chunk_id",
    "iter_files",
    "load_file",
    "readable_title",
    "stream_file",
    "IndexSummary",
    "index_documents",
    "index_paths",
]
