"""Measure a corpus program on the tasks: success rate (the injection harness's grader),
model calls and seconds per run.

    .venv/bin/python data/corpus/measure.py \\
        --program ".nox/conformance-framework-langgraph/bin/python \\
                   data/corpus/programs/langgraph_team.py" \\
        --upstream http://127.0.0.1:8080/v1 --out /tmp/langgraph.jsonl

Each run talks to the model through a counting pass-through on loopback (streamed
replies are relayed as they come), so the program sees an ordinary OpenAI-compatible
endpoint. One line per task is appended to `--out` (a rerun skips the tasks already
there); the summary goes to standard error.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from faultfinder.injection.grading import answers_match, final_line

TASKS = Path(__file__).resolve().parent / "tasks.jsonl"


class CountingProxy:
    """Forwards every request to `upstream` and counts the chat-completion calls."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.calls = 0
        self.keep_exchanges = False
        self.exchanges: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                self._forward(None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self._forward(self.rfile.read(length))

            def _forward(self, body: bytes | None) -> None:
                if self.path.endswith("/v1/traces"):
                    # Spans are accepted and dropped: an empty ExportTraceServiceResponse.
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-protobuf")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                chat = self.path.endswith("/chat/completions")
                if chat:
                    with proxy._lock:
                        proxy.calls += 1
                path = self.path[len("/v1") :] if self.path.startswith("/v1") else self.path
                request = urllib.request.Request(
                    proxy.upstream + path,
                    data=body,
                    method=self.command,
                    headers={"Content-Type": self.headers.get("Content-Type", "application/json")},
                )
                try:
                    answer = urllib.request.urlopen(request, timeout=600)
                except urllib.error.HTTPError as exc:
                    answer = exc
                with answer:
                    self.send_response(answer.status)
                    kind = answer.headers.get("Content-Type", "application/json")
                    self.send_header("Content-Type", kind)
                    self.end_headers()
                    received = []
                    while chunk := answer.read1(65536):
                        received.append(chunk)
                        self.wfile.write(chunk)
                        self.wfile.flush()
                if chat and proxy.keep_exchanges:
                    proxy.exchanges.append(
                        {
                            "request": json.loads(body or b"{}"),
                            "reply": b"".join(received).decode(errors="replace"),
                        }
                    )

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def take(self) -> int:
        with self._lock:
            calls, self.calls = self.calls, 0
        return calls

    def take_exchanges(self) -> list[dict[str, Any]]:
        with self._lock:
            exchanges, self.exchanges = self.exchanges, []
        return exchanges

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_one(
    program: str, task: dict[str, str], proxy: CountingProxy, env: dict[str, str], timeout: float
) -> dict[str, Any]:
    started = time.monotonic()
    proxy.take()
    proxy.take_exchanges()
    try:
        done = subprocess.run(
            shlex.split(program),
            input=task["task"],
            capture_output=True,
            text=True,
            env={**env, "OPENAI_BASE_URL": proxy.base_url},
            timeout=timeout,
            check=False,
        )
        code: int | None = done.returncode
        stdout, stderr = done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code, stdout, stderr = None, str(exc.stdout or ""), "timed out"
    final = final_line(stdout) if code == 0 else ""
    return {
        "id": task["id"],
        "kind": task.get("kind", ""),
        "answer": task["answer"],
        "final": final,
        "correct": code == 0 and answers_match(final, task["answer"]),
        "returncode": code,
        "calls": proxy.take(),
        "seconds": round(time.monotonic() - started, 2),
        "stderr": stderr[-1500:] if code != 0 else "",
        **({"exchanges": proxy.take_exchanges()} if proxy.keep_exchanges else {}),
    }


def summary(lines: list[dict[str, Any]]) -> dict[str, Any]:
    ran = len(lines)
    by_kind: dict[str, list[bool]] = {}
    for line in lines:
        by_kind.setdefault(line["kind"], []).append(bool(line["correct"]))
    return {
        "runs": ran,
        "correct": sum(bool(line["correct"]) for line in lines),
        "success_rate": round(sum(bool(line["correct"]) for line in lines) / max(ran, 1), 3),
        "crashes": sum(line["returncode"] != 0 for line in lines),
        "calls_per_run": round(sum(line["calls"] for line in lines) / max(ran, 1), 2),
        "seconds_per_run": round(sum(line["seconds"] for line in lines) / max(ran, 1), 1),
        "by_kind": {kind: f"{sum(v)}/{len(v)}" for kind, v in sorted(by_kind.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--program", required=True, help="The program's command line.")
    parser.add_argument("--upstream", required=True, help="The model endpoint (ends in /v1).")
    parser.add_argument("--out", required=True, type=Path, help="JSON Lines, one per task.")
    parser.add_argument("--tasks", type=Path, default=TASKS)
    parser.add_argument("--only", default="", help="Comma-separated task ids or kinds.")
    parser.add_argument("--model", default="local")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--exchanges", action="store_true", help="Keep each model call in the output lines."
    )
    args = parser.parse_args(argv)

    tasks = [json.loads(line) for line in args.tasks.read_text().splitlines() if line.strip()]
    if args.only:
        wanted = set(args.only.split(","))
        tasks = [t for t in tasks if t["id"] in wanted or t.get("kind") in wanted]
    done: dict[str, dict[str, Any]] = {}
    if args.out.is_file():
        for line in args.out.read_text().splitlines():
            if line.strip():
                item = json.loads(line)
                done[item["id"]] = item
    env = {
        **os.environ,
        "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", "none"),
        "FAULTFINDER_AGENT_MODEL": args.model,
    }
    proxy = CountingProxy(args.upstream)
    proxy.keep_exchanges = args.exchanges
    # Without a collector the exporters' retries would slow every run down: unless one
    # is named, the pass-through takes the spans.
    if not any(key.startswith("OTEL_EXPORTER_OTLP") for key in os.environ):
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = proxy.base_url.removesuffix("/v1")
    try:
        with args.out.open("a") as out:
            for number, task in enumerate(tasks, start=1):
                if task["id"] in done:
                    continue
                line = run_one(args.program, task, proxy, env, args.timeout)
                done[task["id"]] = line
                out.write(json.dumps(line) + "\n")
                out.flush()
                mark = "ok " if line["correct"] else ("ERR" if line["returncode"] else "no ")
                print(
                    f"[{number}/{len(tasks)}] {mark} {task['id']}: {line['final'][:60]!r} "
                    f"(want {task['answer']!r}; {line['calls']} calls, {line['seconds']} s)",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        proxy.close()
    kept = [done[t["id"]] for t in tasks if t["id"] in done]
    print(json.dumps(summary(kept), indent=1), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
