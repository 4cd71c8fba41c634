"""The ONNX Runtime embedder: same vectors as torch, exported once, the folders it refuses, and the int8 export
checked against fp32."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from modular_rag import demo_corpus_path, onnx_embedder
from modular_rag.config import MiniLMConfig, ProvidersConfig, SentenceTransformersConfig
from modular_rag.errors import ProviderError
from modular_rag.onnx_embedder import OnnxEncoder, UnsupportedModel, export_onnx, read_layout
from modular_rag.providers import Providers, SentenceEncoder, minilm_path

pytestmark = pytest.mark.integration


def _texts() -> list[str]:
    texts = [p.read_text(encoding="utf-8") for p in sorted(Path(demo_corpus_path()).rglob("*.md"))]
    long = " ".join(texts)  # far past the 256-token limit: truncated like sentence-transformers does
    return [*texts, long, "", "E07", "What does error code E07 mean on the e-bike display?"]


@pytest.fixture(scope="module")
def torch_encoder() -> SentenceEncoder:
    return SentenceEncoder(minilm_path())


def _copy(tmp: Path, modules: list[dict[str, str]] | None = None, pooling: dict[str, object] | None = None) -> Path:
    """The bundled model's folder with links to its files, and its modules or pooling replaced."""
    root = tmp / "model"
    shutil.copytree(minilm_path(), root, copy_function=lambda src, dst: Path(dst).symlink_to(src))
    if modules is not None:
        (root / "modules.json").unlink()
        (root / "modules.json").write_text(json.dumps(modules))
    if pooling is not None:
        (root / "1_Pooling" / "config.json").unlink()
        (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return root


def test_default_embedder_runs_on_onnx_and_matches_torch(torch_encoder: SentenceEncoder) -> None:
    encoder = Providers(ProvidersConfig()).encoder
    assert isinstance(encoder, OnnxEncoder) and encoder.dim == 384
    texts = _texts()
    got, expected = encoder.encode(texts), torch_encoder.encode(texts)
    assert got.shape == expected.shape == (len(texts), 384) and got.dtype == np.float32
    assert float(np.abs(got - expected).max()) < 1e-5
    query = texts[-1]
    assert float(np.abs(encoder.encode_query(query) - torch_encoder.encode_query(query)).max()) < 1e-5
    assert encoder.encode([]).shape == (0, 384)


def test_export_is_made_once_and_replaces_stale_ones(tmp_path: Path) -> None:
    weights = str((minilm_path() / "model.safetensors").resolve())
    stale = {"gone": [str(tmp_path / "deleted" / "model.safetensors")], "older": [weights], "other": ["/"]}
    for name, files in stale.items():  # a temporary fine-tune since deleted, an earlier export of the same weights
        (tmp_path / name).mkdir()
        (tmp_path / name / "source.json").write_text(json.dumps({"weights": files}))
    first = export_onnx(minilm_path(), cache=tmp_path)
    made = first.stat().st_mtime_ns
    assert first.parent.parent == tmp_path and first.name == "model.onnx"
    assert export_onnx(minilm_path(), cache=tmp_path) == first and first.stat().st_mtime_ns == made
    assert sorted(p.name for p in first.parent.iterdir()) == ["model.onnx", "source.json"]  # no partial file
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.parent.name, "other"])


def test_cls_pooling_and_either_pooling_config_format(tmp_path: Path, torch_encoder: SentenceEncoder) -> None:
    old_format = {"word_embedding_dimension": 384, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}
    root = _copy(tmp_path, pooling=old_format)
    assert read_layout(root).pooling == "cls"
    (root / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": 384, "pooling_mode": "cls"}))
    assert read_layout(root).pooling == "cls" and read_layout(minilm_path()).pooling == "mean"
    texts = _texts()[:4]
    got = OnnxEncoder(root).encode(texts)  # shares the bundled model's export: same transformer files
    assert float(np.abs(got - SentenceEncoder(root).encode(texts)).max()) < 1e-5
    assert float(np.abs(got - torch_encoder.encode(texts)).max()) > 0.01  # CLS, not mean, pooling


def test_a_module_onnx_does_not_run_falls_back_to_torch_under_auto(tmp_path: Path) -> None:
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
    ]
    root = _copy(tmp_path, modules=modules)
    with pytest.raises(UnsupportedModel, match=r"sentence_transformers\.models\.Dense.*Transformer, Pooling"):
        read_layout(root)
    auto = Providers(ProvidersConfig(embeddings=SentenceTransformersConfig(path=str(root)))).encoder
    assert type(auto) is SentenceEncoder
    strict = ProvidersConfig(embeddings=SentenceTransformersConfig(path=str(root), backend="onnx"))
    with pytest.raises(UnsupportedModel):
        Providers(strict).encoder  # noqa: B018
    with pytest.raises(ProviderError, match="not found"):
        read_layout(tmp_path / "nowhere")


def test_an_unwritable_cache_falls_back_to_torch_under_auto(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")  # the cache path runs through a file: nothing can be written under it
    with pytest.raises(ProviderError, match="cannot export"):
        export_onnx(minilm_path(), cache=blocked / "onnx")
    monkeypatch.setenv("MODULAR_RAG_MODEL_CACHE", str(blocked / "onnx"))
    config = ProvidersConfig(embeddings=MiniLMConfig(batch_size=63))  # not the process's shared default encoder
    assert type(Providers(config).encoder) is SentenceEncoder


def _demo_questions() -> list[str]:
    return [
        "What does error code E07 mean on the e-bike display?",
        "How do I reset the controller?",
        "Which battery fits the TW-550?",
        "warranty period",
    ]


def test_int8_export_agrees_with_fp32_and_is_its_own_file() -> None:
    config = ProvidersConfig(embeddings=MiniLMConfig(precision="int8"))
    encoder = Providers(config).encoder
    assert isinstance(encoder, OnnxEncoder) and encoder.precision == "int8" and encoder.dim == 384
    fp32 = OnnxEncoder(minilm_path())
    texts = [*_texts()[:-3], *_demo_questions()]  # the demo's documents, one far past the token limit, questions
    got, expected = encoder.encode(texts), fp32.encode(texts)
    cosines = (got * expected).sum(axis=1)
    # int8 matmuls are exact with VNNI and saturate without it (AVX2 only): 0.986 at worst measured on such a CPU
    assert float(cosines.min()) >= 0.98 and float(cosines.mean()) >= 0.99, cosines
    assert float(np.abs(got - expected).max()) > 1e-3  # int8 weights, not the fp32 graph again
    for query in _demo_questions():
        assert float(encoder.encode_query(query) @ fp32.encode_query(query)) >= 0.98
    fp32_file = export_onnx(minilm_path())
    int8_file = export_onnx(minilm_path(), precision="int8")
    assert int8_file == fp32_file.with_name("model.int8.onnx")
    assert int8_file.stat().st_size < 0.7 * fp32_file.stat().st_size


def test_int8_export_that_disagrees_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fp32 = export_onnx(minilm_path())  # the cached fp32 export, linked into an empty cache: only int8 is made
    (tmp_path / fp32.parent.name).mkdir()
    (tmp_path / fp32.parent.name / "model.onnx").symlink_to(fp32)
    monkeypatch.setattr(onnx_embedder, "INT8_MIN_COSINE", 0.99999)  # int8 rounding gives ~0.995
    with pytest.raises(ProviderError, match=r"int8 export .* disagrees with fp32: cosine 0\.99\d\d .*precision: fp32"):
        export_onnx(minilm_path(), cache=tmp_path, precision="int8")
    assert sorted(p.name for p in (tmp_path / fp32.parent.name).iterdir()) == ["model.onnx"]  # nothing kept
    with pytest.raises(ProviderError, match="precision 'int4': must be one of fp32, int8"):
        export_onnx(minilm_path(), cache=tmp_path, precision="int4")  # type: ignore[arg-type]


def test_precision_config() -> None:
    # fp32 is left out of the config's JSON: eval index folders keyed by it keep the names they had before
    assert MiniLMConfig().model_dump_json(exclude={"backend"}) == '{"name":"minilm","batch_size":64}'
    assert MiniLMConfig(precision="int8").model_dump(exclude={"backend"}) == {
        "name": "minilm",
        "batch_size": 64,
        "precision": "int8",
    }
    assert MiniLMConfig.model_validate(MiniLMConfig(precision="int8").model_dump()).precision == "int8"
    with pytest.raises(ValueError, match="precision int8 runs on ONNX Runtime: backend must be auto or onnx"):
        MiniLMConfig(precision="int8", backend="torch")
