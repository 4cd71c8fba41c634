"""Sentence-transformers models run by ONNX Runtime: the same vectors as torch, without torch at query time.

A sentence-transformers folder (a transformer, mean or CLS pooling, optional normalisation: all-MiniLM-L6-v2
and what ``modular-rag finetune`` writes) is exported once to ONNX, checked against torch, and cached under
:func:`onnx_cache_home`, keyed by the model's files. Later processes load only ``onnxruntime`` and
``tokenizers``: a fraction of a second instead of the ~10 s that importing torch, transformers and
sentence-transformers takes, and a query embeds several times faster.

``precision="int8"`` runs a copy of that export with int8 weights (onnxruntime's dynamic quantisation of the
weight matrices, per output channel; activations are quantised on the fly): about twice the throughput on a CPU
with VNNI. It is made from the fp32 export once, kept beside it, and refused unless its vectors agree with the
fp32 ones (cosine >= 0.99 on every text of a fixed set).

    from modular_rag.onnx_embedder import OnnxEncoder
    encoder = OnnxEncoder(minilm_path())          # exports on first use if no export is cached
    vectors = encoder.encode(["a chunk", "another"])
    fast = OnnxEncoder(minilm_path(), precision="int8")
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import shutil
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np

from modular_rag.encoders import LocalEncoder, l2_normalise
from modular_rag.errors import MissingDependencyError, ProviderError
from modular_rag.trace import record

__all__ = [
    "OnnxEncoder",
    "UnsupportedModel",
    "ModelLayout",
    "Precision",
    "read_layout",
    "export_onnx",
    "onnx_cache_home",
]

log = logging.getLogger(__name__)

EXPORT_FORMAT = 1
"""Bumped when the exported graph or its quantisation changes, so older exports are not reused."""

Precision = Literal["fp32", "int8"]
PRECISIONS: tuple[str, ...] = ("fp32", "int8")

_PROBES = (
    "What does error code E07 mean on the e-bike display?",
    "Retrieval-augmented generation grounds a language model's answer in retrieved passages; " * 6,
    "ok",
)
_TOLERANCE = 1e-4  # largest absolute difference allowed between ONNX Runtime's and torch's token states
INT8_MIN_COSINE = 0.99
"""The int8 export is refused if any text of :data:`AGREEMENT_TEXTS` gets a vector with a lower cosine to its fp32
vector."""
AGREEMENT_TEXTS: tuple[str, ...] = (
    _PROBES[0],
    _PROBES[1],
    "What is BRCA1?",
    "who wrote the song that was number one in the uk when the berlin wall fell",
    "Which magazine was started first, Arthur's Magazine or First for Women?",
    "Vitamin D deficiency is associated with an increased risk of tuberculosis.",
    "Alterations of the architecture of cerebral white matter in the developing human brain can affect cortical "
    "development and result in functional disabilities.",
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France, named after the engineer "
    "Gustave Eiffel, whose company designed and built it between 1887 and 1889.",
    "Press and hold the power button for ten seconds to reset the controller; the LED blinks twice.",
    "0.5 mg/kg IV q6h, max 4 doses (see Table 2).",
    "def retrieve(query: str, k: int = 10) -> list[str]: return index.search(query, k)",
)
"""The fixed set of English texts the int8 export is checked on, embedded in one batch: questions, claims, passages,
instructions, units, code and a text past the 256-token limit. One-word texts are not in it: the fewer the tokens,
the more one rounding weighs ('ok' and 'yes' get cosine 0.96-0.98; a three-word question 0.99)."""


class UnsupportedModel(ProviderError):
    """The model folder has a module the ONNX path does not run (the torch backend runs any model)."""


@dataclass(frozen=True)
class ModelLayout:
    """What the ONNX path needs from a sentence-transformers folder.

    Attributes:
        root: The model folder.
        transformer: The folder of the transformer (its ``config.json``, weights and ``tokenizer.json``).
        pooling: ``"mean"`` or ``"cls"``.
        max_seq_length: Tokens kept per text (longer texts are truncated, as sentence-transformers does).
    """

    root: Path
    transformer: Path
    pooling: str
    max_seq_length: int


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise ProviderError(f"cannot read {path}: {exc}") from exc


def _pooling_mode(config: dict[str, Any], where: Path) -> str:
    mode = config.get("pooling_mode")  # sentence-transformers 5 writes one mode by name
    if mode is None:  # earlier versions write a flag per mode
        modes = [
            m
            for m in ("mean", "cls", "max", "lasttoken", "weightedmean")
            if config.get(f"pooling_mode_{m}_token") or config.get(f"pooling_mode_{m}_tokens")
        ]
        mode = modes[0] if len(modes) == 1 else "+".join(modes) or "none"
    mode = {"mean_tokens": "mean", "cls_token": "cls"}.get(str(mode), str(mode))
    if mode not in ("mean", "cls"):
        raise UnsupportedModel(f"{where}: pooling {mode!r}; the ONNX backend runs mean or cls pooling")
    return mode


def read_layout(path: str | os.PathLike[str]) -> ModelLayout:
    """Read a sentence-transformers folder's modules and settings.

    Args:
        path: The model folder.

    Returns:
        Its :class:`ModelLayout`.

    Raises:
        ProviderError: If the folder does not exist.
        UnsupportedModel: If it has a module other than a transformer, mean/CLS pooling and normalisation, or no
            ``tokenizer.json``.
    """
    root = Path(path)
    if not root.is_dir():
        raise ProviderError(f"embedding model folder not found: {root}")
    transformer, pooling = root, "mean"  # a plain transformer folder: sentence-transformers mean-pools it
    if (root / "modules.json").exists():
        modules = json.loads((root / "modules.json").read_text(encoding="utf-8"))
        for module in modules:
            kind = str(module.get("type", "")).rsplit(".", 1)[-1]
            folder = root / str(module.get("path", ""))
            if kind == "Transformer":
                transformer = folder
            elif kind == "Pooling":
                pooling = _pooling_mode(_read_json(folder / "config.json"), folder)
            elif kind != "Normalize":  # vectors are normalised anyway
                raise UnsupportedModel(
                    f"{root}: module {module.get('type')!r}; the ONNX backend runs Transformer, Pooling (mean, cls) "
                    "and Normalize modules (use embeddings backend: torch for this model)"
                )
    if not (transformer / "tokenizer.json").exists():
        raise UnsupportedModel(f"{transformer}: no tokenizer.json (a fast tokenizer); use backend: torch")
    settings = root / "sentence_bert_config.json"
    limit = _read_json(settings).get("max_seq_length") if settings.exists() else None
    if limit is None:
        tokenizer_config = transformer / "tokenizer_config.json"
        limit = _read_json(tokenizer_config).get("model_max_length") if tokenizer_config.exists() else None
    max_seq_length = min(int(limit or 512), 512)
    return ModelLayout(root=root, transformer=transformer, pooling=pooling, max_seq_length=max_seq_length)


def onnx_cache_home() -> Path:
    """Where ONNX exports are kept: ``$MODULAR_RAG_MODEL_CACHE``, else ``$XDG_CACHE_HOME/modular_rag/onnx``,
    else ``~/.cache/modular_rag/onnx``."""
    if os.environ.get("MODULAR_RAG_MODEL_CACHE"):
        return Path(os.environ["MODULAR_RAG_MODEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "modular_rag" / "onnx"


def _export_path(layout: ModelLayout, cache: Path) -> Path:
    """The export's file, keyed by the transformer's config and its weight files (where they really are, their
    sizes and times). Pooling runs outside the exported graph, so folders sharing a transformer share an export."""
    weights = _weights(layout)
    parts: list[Any] = [EXPORT_FORMAT, (layout.transformer / "config.json").read_text(encoding="utf-8")]
    for file in weights:
        parts.append([str(file), file.stat().st_size, file.stat().st_mtime_ns])
    key = hashlib.sha1(json.dumps(parts).encode()).hexdigest()[:16]
    return cache / f"{weights[0].parent.name}-{key}" / "model.onnx"


def _weights(layout: ModelLayout) -> list[Path]:
    """The transformer's weight files, where they really are (links resolved)."""
    found = sorted(layout.transformer.glob("*.safetensors")) + sorted(layout.transformer.glob("*.bin"))
    if not found:
        raise ProviderError(f"{layout.transformer}: no weights (*.safetensors or *.bin)")
    return [file.resolve() for file in found]


def _prune(kept: Path) -> None:
    """Drop other exports of the same weight files (since retrained) and exports whose weights are gone."""
    mine = set(json.loads((kept / "source.json").read_text())["weights"])
    for folder in kept.parent.iterdir():
        source = folder / "source.json"
        if folder == kept or not source.exists():
            continue
        try:
            theirs = set(json.loads(source.read_text())["weights"])
        except (OSError, ValueError, KeyError):
            continue
        if theirs & mine or not all(Path(w).exists() for w in theirs):
            log.info("removing stale ONNX export %s", folder)
            shutil.rmtree(folder, ignore_errors=True)


def export_onnx(
    path: str | os.PathLike[str], *, cache: str | os.PathLike[str] | None = None, precision: Precision = "fp32"
) -> Path:
    """Export a sentence-transformers folder's transformer to ONNX, once; later calls return the cached file.

    The export is checked before it is kept: ONNX Runtime's token states on texts of other lengths than the
    traced one must match torch's to within 1e-4. Making one removes the cache's exports of earlier versions of
    the same weight files and exports whose weight files are gone (models fine-tuned into temporary folders).
    The int8 export is quantised from the fp32 one (made first if needed), kept beside it as ``model.int8.onnx``,
    and checked against it: the sentence vectors of :data:`AGREEMENT_TEXTS` must have cosine >=
    :data:`INT8_MIN_COSINE` with their fp32 vectors.

    Args:
        path: The model folder.
        cache: The cache folder (default :func:`onnx_cache_home`).
        precision: ``"fp32"`` (the weights as trained) or ``"int8"`` (int8 weight matrices).

    Returns:
        The ``model.onnx`` file, or ``model.int8.onnx`` for int8.

    Raises:
        UnsupportedModel: If the folder's modules are not ones the ONNX path runs.
        MissingDependencyError: If an export is needed and torch, transformers or onnx is not installed.
        ProviderError: If the export fails or does not match torch, if the int8 export's vectors do not agree with
            the fp32 ones (the error names the lowest cosine), or if ``precision`` is not fp32 or int8.
    """
    if precision not in PRECISIONS:
        raise ProviderError(f"ONNX export precision {precision!r}: must be one of {', '.join(PRECISIONS)}")
    if precision == "int8":
        return _quantised(read_layout(path), export_onnx(path, cache=cache))
    layout = read_layout(path)
    target = _export_path(layout, Path(cache) if cache is not None else onnx_cache_home())
    if target.exists():
        return target
    try:
        import onnx  # noqa: F401 - torch's exporter needs it
        import torch
        from transformers import AutoModel
        from transformers.utils import logging as transformers_logging
    except ImportError as exc:
        raise MissingDependencyError(
            f"exporting {layout.root} to ONNX needs torch, transformers and onnx (once per model): "
            "pip install torch (a CPU build), then pip install 'modular-rag[local]'; or use embeddings backend: torch"
        ) from exc
    log.info("exporting %s to ONNX at %s (once)", layout.root, target)
    transformers_logging.disable_progress_bar()
    # eager attention: plain matmul/softmax ops, the same traced graph whatever the mask
    model = AutoModel.from_pretrained(str(layout.transformer), local_files_only=True, attn_implementation="eager")
    model.eval()
    names = _input_names(model)

    class _TokenStates(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: Any) -> Any:
            return self.inner(**dict(zip(names, inputs, strict=True))).last_hidden_state

    tokenizer = _tokenizer(layout)
    traced, check = _feeds(tokenizer, _PROBES[:2], names), _feeds(tokenizer, _PROBES, names)
    with torch.inference_mode():  # before exporting: the TorchScript exporter leaves the model changed
        expected = model(**{n: torch.from_numpy(v) for n, v in check.items()}).last_hidden_state.numpy()
    partial = target.with_name(f"model.{os.getpid()}.partial")
    axes = {name: {0: "batch", 1: "tokens"} for name in [*names, "token_states"]}
    try:
        target.parent.mkdir(parents=True, exist_ok=True)  # an unwritable cache is a ProviderError like the rest
        with warnings.catch_warnings():  # the TorchScript exporter's deprecation and tracer notes
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _TokenStates(model),
                tuple(torch.from_numpy(traced[n]) for n in names),
                str(partial),
                input_names=list(names),
                output_names=["token_states"],
                dynamic_axes=axes,
                opset_version=17,
                do_constant_folding=True,
                dynamo=False,
            )
        got = _session(partial, threads=None).run(None, check)[0]
        kept = check["attention_mask"][..., None] == 1  # padded positions are never pooled
        worst = float(np.abs(np.where(kept, got - expected, 0.0)).max())
        if worst > _TOLERANCE:
            raise ProviderError(f"ONNX export of {layout.root} differs from torch by {worst:.1e} (> {_TOLERANCE})")
        os.replace(partial, target)  # atomic: a concurrent process sees no file or the whole file
        (target.parent / "source.json").write_text(json.dumps({"weights": [str(w) for w in _weights(layout)]}))
        _prune(target.parent)
    except ProviderError:
        raise
    except Exception as exc:
        raise ProviderError(f"cannot export {layout.root} to ONNX: {type(exc).__name__}: {exc}") from exc
    finally:
        with contextlib.suppress(OSError):  # nothing to remove, or nowhere it could have been written
            partial.unlink(missing_ok=True)
    return target


def _quantised(layout: ModelLayout, source: Path) -> Path:
    """The int8 copy of the fp32 export ``source``, made and checked once (see :func:`export_onnx`)."""
    target = source.with_name("model.int8.onnx")
    if target.exists():
        return target
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise MissingDependencyError(
            f"quantising {layout.root} to int8 needs onnx and onnxruntime (once per model): "
            "pip install 'modular-rag[local]'; or use embeddings precision: fp32"
        ) from exc
    log.info("quantising %s to int8 at %s (once)", source, target)
    partial = target.with_name(f"model.int8.{os.getpid()}.partial")
    try:
        with _without_preprocessing_hint():
            # the weight matrices only (not the attention products of two activations, whose int8 rounding costs
            # far more accuracy), one scale per output channel: cosine to fp32 0.992 at worst on SciFact abstracts,
            # 0.90 with one scale per matrix
            quantize_dynamic(
                source, partial, op_types_to_quantize=["MatMul"], per_channel=True, weight_type=QuantType.QInt8
            )
        tokenizer = _tokenizer(layout)
        fp32 = _embed(_session(source, threads=None), tokenizer, layout.pooling, AGREEMENT_TEXTS)
        int8 = _embed(_session(partial, threads=None), tokenizer, layout.pooling, AGREEMENT_TEXTS)
        cosines = (fp32 * int8).sum(axis=1)
        worst = int(np.argmin(cosines))
        if cosines[worst] < INT8_MIN_COSINE:
            raise ProviderError(
                f"int8 export of {layout.root} disagrees with fp32: cosine {cosines[worst]:.4f} on "
                f"{AGREEMENT_TEXTS[worst][:60]!r} (at least {INT8_MIN_COSINE} needed); use embeddings precision: fp32"
            )
        os.replace(partial, target)
    except ProviderError:
        raise
    except Exception as exc:
        raise ProviderError(f"cannot quantise {source} to int8: {type(exc).__name__}: {exc}") from exc
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
    return target


@contextlib.contextmanager
def _without_preprocessing_hint() -> Any:
    """Silence the quantiser's advice, logged on the root logger, to pre-process the model first (shape inference
    and graph rewrites); the export is quantised as it is, and its vectors are checked against fp32 instead."""

    def keep(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Please consider to run pre-processing")

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


def _input_names(model: Any) -> tuple[str, ...]:
    accepted = inspect.signature(model.forward).parameters
    return tuple(n for n in ("input_ids", "attention_mask", "token_type_ids") if n in accepted)


def _tokenizer(layout: ModelLayout) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:  # pragma: no cover - a dependency of transformers and chromadb
        raise MissingDependencyError("the ONNX backend needs tokenizers: pip install tokenizers") from exc
    tokenizer = Tokenizer.from_file(str(layout.transformer / "tokenizer.json"))
    tokenizer.enable_truncation(layout.max_seq_length)
    tokenizer.no_padding()  # batches are padded to their longest text in _feeds
    return tokenizer


def _feeds(tokenizer: Any, texts: Any, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    encodings = tokenizer.encode_batch(list(texts))
    width = max(len(e.ids) for e in encodings)
    feeds = {name: np.zeros((len(encodings), width), dtype=np.int64) for name in names}
    for row, enc in enumerate(encodings):
        n = len(enc.ids)
        feeds["input_ids"][row, :n] = enc.ids
        feeds["attention_mask"][row, :n] = 1
        if "token_type_ids" in feeds:
            feeds["token_type_ids"][row, :n] = enc.type_ids
    return feeds


def _embed(session: Any, tokenizer: Any, pooling: str, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """L2-normalised sentence vectors of ``texts`` from a session's token states, pooled as the model pools."""
    names = tuple(i.name for i in session.get_inputs())
    dim = int(session.get_outputs()[0].shape[-1])
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # sorted by length, so a batch pads little
    out = np.empty((len(texts), dim), dtype=np.float32)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        feeds = _feeds(tokenizer, [texts[i] for i in rows], names)
        states = session.run(None, feeds)[0]
        if pooling == "cls":
            pooled = states[:, 0]
        else:
            mask = feeds["attention_mask"][..., None].astype(np.float32)
            pooled = (states * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        out[rows] = l2_normalise(pooled)
    return out


def _session(path: Path, threads: int | None) -> Any:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise MissingDependencyError("the ONNX backend needs onnxruntime: pip install onnxruntime") from exc
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    # idle threads sleep instead of spinning: they share the cores with llama-server and the flow's own work
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class OnnxEncoder(LocalEncoder):
    """A sentence-transformers folder run by ONNX Runtime; the same L2-normalised vectors as
    :class:`~modular_rag.encoders.SentenceEncoder` (to within 1e-5).

    Args:
        path: Model folder (see :func:`read_layout` for what it may hold).
        batch_size: Texts per forward pass; texts are sorted by length first, so a batch pads little.
        query_prefix: Text put before queries.
        threads: ONNX Runtime's intra-op threads (default: its own choice, the physical cores).
        cache: Where the ONNX export is kept (default :func:`onnx_cache_home`).
        precision: ``"fp32"``: the same vectors as torch; ``"int8"``: int8 weights, about twice as fast, vectors
            within cosine 0.99 of fp32 (see :func:`export_onnx`).

    Raises:
        UnsupportedModel: At construction, if the folder has modules the ONNX path does not run.
        ProviderError: At construction, if ``precision`` is not fp32 or int8.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        batch_size: int = 64,
        query_prefix: str = "",
        threads: int | None = None,
        cache: str | os.PathLike[str] | None = None,
        precision: Precision = "fp32",
    ) -> None:
        super().__init__(path, batch_size=batch_size, query_prefix=query_prefix)
        if precision not in PRECISIONS:
            raise ProviderError(f"ONNX encoder precision {precision!r}: must be one of {', '.join(PRECISIONS)}")
        self.layout = read_layout(path)
        self.threads = threads
        self.cache = cache
        self.precision = precision

    @cached_property
    def session(self) -> Any:
        """The ONNX Runtime session (the model is exported first if no export is cached)."""
        return _session(export_onnx(self.path, cache=self.cache, precision=self.precision), self.threads)

    @cached_property
    def tokenizer(self) -> Any:
        """The model's fast tokenizer, truncating at its ``max_seq_length``."""
        return _tokenizer(self.layout)

    @property
    def dim(self) -> int | None:
        """Vector size."""
        return int(self.session.get_outputs()[0].shape[-1])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts (one embedding call in the ledger)."""
        record(embed_calls=1)
        if not texts:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        return _embed(self.session, self.tokenizer, self.layout.pooling, texts, self.batch_size)
