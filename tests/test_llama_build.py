"""The local model's llama-server is built portably (no AVX-512, no AMX, whatever cpuid lists), runs here and on an
emulated CPU without AVX-512, and a binary that dies (SIGILL) is reported as such by the doctor and by a flow."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from modular_rag import llama_build
from modular_rag.llama_build import cpu_flags, portable_cmake_args, problems, scan, x86_level
from modular_rag.llama_server import BINARY_ENV, exit_reason, llama_server_binary, local_model_path, probe


def _flags(text: str) -> set[str]:
    return set(text.split(" "))


# the flags of the Xeon VM whose native build died with SIGILL (cpuid lists AVX-512 and AMX)
SAPPHIRE_RAPIDS = _flags(
    "fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt avx f16c fma bmi1 avx2 bmi2 avx512f avx512dq avx512ifma avx512cd "
    "avx512bw avx512vl avx_vnni avx512_bf16 avx512vbmi avx512_vbmi2 avx512_vnni avx512_bitalg avx512_vpopcntdq "
    "amx_bf16 avx512_fp16 amx_tile amx_int8"
)
HASWELL = _flags("fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt avx f16c fma bmi1 avx2 bmi2")
SANDY_BRIDGE = _flags("fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt avx")
NEHALEM = _flags("fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt")


def _on(args: list[str]) -> set[str]:
    return {a[len("-DGGML_") : -len("=ON")] for a in args if a.startswith("-DGGML_") and a.endswith("=ON")}


@pytest.mark.unit
def test_portable_args_never_turn_on_avx512_or_amx_whatever_cpuid_lists() -> None:
    args = portable_cmake_args("x86_64", SAPPHIRE_RAPIDS)
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_NATIVE=ON" not in args
    assert _on(args) == {"SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"}
    for option in ("AVX512", "AVX512_VNNI", "AVX512_BF16", "AVX512_VBMI", "AMX_TILE", "AMX_INT8", "AMX_BF16"):
        assert f"-DGGML_{option}=OFF" in args
    assert args == portable_cmake_args("x86_64", HASWELL)  # one build for every machine of the level


@pytest.mark.unit
def test_a_machine_below_x86_64_v3_gets_the_highest_level_it_lists() -> None:
    assert [x86_level(f) for f in (SAPPHIRE_RAPIDS, HASWELL, SANDY_BRIDGE, NEHALEM, set())] == [
        "x86-64-v3",
        "x86-64-v3",
        "x86-64-v2+avx",
        "x86-64-v2",
        "x86-64",
    ]
    assert _on(portable_cmake_args("x86_64", SANDY_BRIDGE)) == {"SSE42", "AVX"}
    assert _on(portable_cmake_args("x86_64", NEHALEM)) == {"SSE42"}
    assert _on(portable_cmake_args("x86_64", set())) == set()
    assert "-DGGML_NATIVE=OFF" not in portable_cmake_args("aarch64", set())  # llama.cpp's own default there
    assert cpu_flags("processor\t: 0\nflags\t\t: fpu avx2 amx_tile\n") == {"fpu", "avx2", "amx_tile"}


@pytest.mark.unit
def test_the_wheel_cache_is_keyed_by_release_and_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODULAR_RAG_WHEEL_CACHE", str(tmp_path))
    assert llama_build.wheel_cache() == tmp_path
    v3, v2 = portable_cmake_args("x86_64", HASWELL), portable_cmake_args("x86_64", NEHALEM)
    keys = {llama_build._key(v3, "1.0"), llama_build._key(v2, "1.0"), llama_build._key(v3, "2.0")}
    assert len(keys) == 3  # pip's own cache keys a built wheel by the release alone


@pytest.mark.unit
@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("objdump")), reason="needs gcc and objdump")
def test_scan_finds_amx_and_avx512_instructions_and_none_in_avx2_code(tmp_path: Path) -> None:
    code = {
        "avx2": ("-mavx2 -mfma", "__m256 f(__m256 a, __m256 b) { return _mm256_fmadd_ps(a, b, a); }"),
        "avx512": ("-mavx512f", "__m512 f(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }"),
        "amx": ("-mamx-tile", "void f(void) { _tile_zero(4); _tile_release(); }"),
    }
    held = {}
    for name, (flags, body) in code.items():
        source = tmp_path / f"{name}.c"
        source.write_text("#include <immintrin.h>\n" + body + "\n")
        library = tmp_path / f"lib{name}.so"
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", *flags.split(), str(source), "-o", str(library)], check=True)
        held[name] = scan([library])
    assert held["avx2"] == {"amx": 0, "avx512": 0}
    assert held["avx512"]["avx512"] > 0 and held["avx512"]["amx"] == 0
    assert held["amx"]["amx"] > 0


@pytest.mark.unit
def test_exit_reasons_name_the_signal_and_sigill_the_rebuild() -> None:
    said = exit_reason(-signal.SIGILL)
    assert "SIGILL" in said and "illegal instruction" in said and "-m modular_rag.llama_build install" in said
    assert BINARY_ENV in said
    assert "SIGKILL" in exit_reason(-signal.SIGKILL) and exit_reason(1) == "llama-server exited with code 1"


@pytest.mark.integration
def test_the_installed_llama_server_is_the_portable_build() -> None:
    # fails on pip's default (native) build: not built by llama_build, and AVX-512 (and AMX, where cpuid lists it)
    # instructions in libggml-cpu
    assert problems() == []


def _wrapper(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llama-server"
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.mark.integration  # not slow: it is what keeps a native build (SIGILL on an older CPU) out of CI
@pytest.mark.skipif(shutil.which("qemu-x86_64") is None, reason="needs qemu-user (scripts/setup.sh installs it)")
def test_llama_server_runs_on_an_emulated_cpu_without_avx512(tmp_path: Path) -> None:
    """qemu's Haswell executes x86-64-v3 and stops with SIGILL at the first AVX-512 or AMX instruction (a native
    build here dies so in its warm-up); the server reads a prompt of about 24 tokens, so its matrix products are
    batched (more rows than an AMX tile's 16), and writes a token. Emulated, a prompt token costs about 2.9 s: the
    doctor's 64-token prompt took 227 s here, this one about a third of that."""
    real = llama_server_binary()
    wrapper = _wrapper(tmp_path, f'#!/bin/sh\nexec qemu-x86_64 -cpu Haswell "{real}" "$@" 2>/dev/null\n')
    prompt = "A bicycle's chain drives the rear wheel through a cassette of sprockets. In one word, the chain drives"
    said = probe(local_model_path(), threads=2, timeout_s=600, binary=wrapper, prompt=prompt)
    assert "answered one token" in said
    assert int(said.split("-token prompt")[0].rsplit(" ", 1)[1]) > 16, said  # batched past one AMX tile


SIGILL_AT_START = "#!/bin/sh\nkill -ILL $$\n"

# answers /health, then dies with SIGILL on the first prompt, as a native build does in its first matrix product
SIGILL_AT_PROMPT = f"""#!{sys.executable}
import http.server, os, signal, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'{{"status": "ok"}}')
    def do_POST(self):
        os.kill(os.getpid(), signal.SIGILL)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def _cli(*args: str, binary: Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, BINARY_ENV: str(binary)}
    return subprocess.run(
        [sys.executable, "-m", "modular_rag.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600
    )


@pytest.mark.integration
@pytest.mark.parametrize("script", [SIGILL_AT_START, SIGILL_AT_PROMPT], ids=["at-start", "at-first-prompt"])
def test_the_doctor_reports_a_binary_that_dies_with_sigill_and_names_the_rebuild(tmp_path: Path, script: str) -> None:
    done = _cli("doctor", binary=_wrapper(tmp_path, script))
    assert done.returncode == 1, done.stdout
    line = next(x for x in done.stdout.splitlines() if x.startswith("FAILED   llama-server (starts"))
    assert "killed by SIGILL (illegal instruction)" in line and "-m modular_rag.llama_build install" in line
    assert "ok       embedder" in done.stdout and "ok       vector store" in done.stdout


def _template(name: str, demo_dir: Path, folder: Path, **operators: dict[str, object]) -> Path:
    from modular_rag import template_path

    config = yaml.safe_load(template_path(name).read_text())
    config["providers"]["vectorstore"]["path"] = str(demo_dir)
    config["operators"].update(operators)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.integration
@pytest.mark.parametrize("script", [SIGILL_AT_START, SIGILL_AT_PROMPT], ids=["at-start", "at-first-prompt"])
def test_a_flow_whose_model_dies_says_so_once_and_exits_1(tmp_path: Path, demo_dir: Path, script: str) -> None:
    binary = _wrapper(tmp_path, script)
    done = _cli(
        "run", "--config", str(_template("iterative", demo_dir, tmp_path)), "What does E07 mean?", binary=binary
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: ") and "SIGILL" in done.stderr and "modular-rag doctor" in done.stderr
    # every LLM step isolated by on_error: skip: the fallback answer is printed, the error once, the status is 1
    skip = {"name": "cited_answer", "params": {"max_tokens": 96}, "on_error": "skip"}
    config = _template(
        "recursive",
        demo_dir,
        tmp_path,
        generate=skip,
        clarify={"name": "decompose", "params": {"mode": "clarify"}, "on_error": "skip"},
    )
    done = _cli("run", "--config", str(config), "What does E07 mean?", binary=binary)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "A: " in done.stdout and done.stdout.count("SIGILL") == 1, done.stdout
    assert "2 steps failed and went on under on_error: skip" in done.stderr
    as_json = _cli("run", "--json", "--config", str(config), "What does E07 mean?", binary=binary)
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["answer"]
