# Sourced by natural.sh and flips.sh: a sidecar on a run folder's own database
# (OUT/sidecar.db), for `faultfinder verify` to read the runs from and post to. `inject run`
# starts its own on the same file while it records, so one runs at a time.
# Needs $FAULTFINDER, $PYTHON and a `say` function.
sidecar_pid=""
sidecar_url=""
stop_sidecar() {
  if [ -n "$sidecar_pid" ]; then
    kill "$sidecar_pid" 2>/dev/null || true
    wait "$sidecar_pid" 2>/dev/null || true
    sidecar_pid=""
  fi
}
trap stop_sidecar EXIT
trap 'exit 143' TERM INT

start_sidecar() {
  local out=$1 port
  port=$("$PYTHON" -c 'from faultfinder.evaluation.sidecar import free_port; print(free_port())')
  FAULTFINDER_LOG_LEVEL=WARNING "$FAULTFINDER" serve --port "$port" --no-grpc --processes 1 \
    --database-url "sqlite+aiosqlite:///$out/sidecar.db" >> "$out/verify-sidecar.log" 2>&1 &
  sidecar_pid=$!
  sidecar_url="http://127.0.0.1:$port"
  for _ in $(seq 240); do
    if "$PYTHON" -c 'import sys, httpx; httpx.get(sys.argv[1], timeout=1).raise_for_status()' \
      "$sidecar_url/readyz" 2> /dev/null; then return 0; fi
    if ! kill -0 "$sidecar_pid" 2>/dev/null; then break; fi
    sleep 0.5
  done
  say "the sidecar on $out/sidecar.db did not start; see $out/verify-sidecar.log"
  return 1
}
