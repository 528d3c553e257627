"""The nightly suite file: datasets × attributors × settings, and the regression gate.

A suite is a TOML file (the repository's is `default.toml` beside this module; a deployment
writes its own, docs/nightly.md describes every key). Each attributor runs on every dataset
and with every settings block unless it lists the ones it takes; each such combination is
an *entry*, keyed `dataset/attributor/settings` by the names the suite gives them, and
entries with the same key in successive runs are compared by the gate.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from faultfinder.attributors.llm.methods import LLM_METHODS
from faultfinder.datasets import DATASET_SPECS
from faultfinder.evaluation.subsets import FIXED_SUBSET_SEED

__all__ = [
    "DEFAULT_SUITE",
    "GATE_METRICS",
    "AttributorDef",
    "DatasetDef",
    "Entry",
    "GateDef",
    "SettingsDef",
    "Suite",
    "SuiteError",
    "endpoint_configured",
    "load_suite",
]

DEFAULT_SUITE = Path(__file__).with_name("default.toml")
"""The repository's nightly suite: zero-LLM attributors on Who&When and the injected corpus."""

GATE_METRICS = ("agent", "step", "agent_and_step", "step_pm1", "step_pm3", "step_pm5")
"""Per-record right/wrong scores the gate can compare (`RecordScore.as_dict`)."""

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:+-]*$"
"""Dataset, attributor and settings names: they make up the entry key `a/b/c`."""

ENDPOINT_VARIABLES = ("OPENAI_BASE_URL", "FAULTFINDER_LLM_BASE_URL")
"""Where an LLM entry's endpoint may come from when the suite names none."""


class SuiteError(ValueError):
    """The suite file cannot be used; the message names the file and the key at fault."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DatasetDef(_Strict):
    """Labelled records: a dataset spec or a sidecar database's labelled runs."""

    name: str = Field(pattern=NAME_PATTERN)
    spec: str | None = None
    """A `--dataset` spec: a named dataset or a path (relative to the suite file)."""
    database: bool | str | None = None
    """`true`: the labelled runs in the history's own database; a URL: another database's."""
    limit: int | None = Field(default=None, ge=1)
    """At most this many records per subset."""
    fraction: str | None = None
    """A fixed fraction of each subset (e.g. "1/3"), chosen by `subset_seed`."""
    subset_seed: int = FIXED_SUBSET_SEED
    records: str | None = None
    """A file of record ids (one per line), relative to the suite file."""
    optional: bool = False
    """Skip the dataset's entries when its files are missing, instead of failing."""
    note: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.spec is None) == (self.database is None or self.database is False):
            raise ValueError("give either `spec` or `database`")
        if self.records is not None and self.fraction is not None:
            raise ValueError("give either `records` or `fraction`, not both")
        return self


class AttributorDef(_Strict):
    """A registered attributor with its configuration; LLM methods with their model."""

    name: str = Field(pattern=NAME_PATTERN)
    attributor: str | None = None
    """The registered attributor (default: `name`)."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the attributor's factory (e.g. `model_path` of `learned`)."""
    datasets: list[str] | None = None
    """Only these datasets (default: every dataset)."""
    settings: list[str] | None = None
    """Only these settings blocks (default: every one)."""
    trained_on: list[str] = Field(default_factory=list)
    """The suite's datasets the attributor was fitted on: its entries there are in-sample
    (training-set) figures, marked so wherever they are shown, never held-out accuracy."""
    note: str | None = None
    time_budget_s: float | None = Field(default=None, gt=0)
    """Wall time one entry may take; records left when it runs out count as failed."""
    model: str | None = None
    base_url: str | None = None
    """The OpenAI-compatible endpoint; without it OPENAI_BASE_URL or
    FAULTFINDER_LLM_BASE_URL, and without those the entry is skipped."""
    max_tokens: int | None = Field(default=None, ge=1)
    timeout: float | None = Field(default=None, gt=0)
    token_budget: int | None = Field(default=None, ge=1)
    """Tokens one attribution may spend."""
    context_tokens: int | None = Field(default=None, gt=256)

    @property
    def method(self) -> str:
        return self.attributor or self.name

    @property
    def uses_model(self) -> bool:
        return self.method in LLM_METHODS

    def model_overrides(self) -> dict[str, Any]:
        """The model client settings the suite sets (the API key only ever from the
        environment)."""
        values = {
            "model": self.model,
            "base_url": self.base_url,
            "max_tokens": self.max_tokens,
            "timeout": self.timeout,
            "token_budget": self.token_budget,
            "context_tokens": self.context_tokens,
        }
        return {key: value for key, value in values.items() if value is not None}

    @model_validator(mode="after")
    def _model_keys_for_llm_methods(self) -> Self:
        if self.model_overrides() and not self.uses_model:
            raise ValueError(
                f"model settings apply to the LLM methods ({', '.join(LLM_METHODS)}),"
                f" not {self.method!r}"
            )
        return self


class SettingsDef(_Strict):
    """How every attributor is run."""

    name: str = Field(pattern=NAME_PATTERN)
    use_ground_truth: bool = True
    """Whether the methods may see the task's correct answer."""
    seed: int = 0
    concurrency: int = Field(default=4, ge=1)
    """Records attributed at once."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Method-specific options (`AttributeOptions.extra`)."""


class GateDef(_Strict):
    """When an entry counts as worse than its baseline."""

    alpha: float = Field(default=0.05, gt=0, lt=1)
    """False-alarm rate of one entry's gate, split evenly over its metrics."""
    metrics: list[str] = Field(default_factory=lambda: ["agent", "step"], min_length=1)

    @model_validator(mode="after")
    def _known_metrics(self) -> Self:
        unknown = [metric for metric in self.metrics if metric not in GATE_METRICS]
        if unknown:
            raise ValueError(f"unknown metrics {unknown}; known: {', '.join(GATE_METRICS)}")
        return self


class Suite(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    gate: GateDef = Field(default_factory=GateDef)
    datasets: list[DatasetDef] = Field(min_length=1)
    attributors: list[AttributorDef] = Field(min_length=1)
    settings: list[SettingsDef] = Field(
        default_factory=lambda: [SettingsDef(name="default")], min_length=1
    )

    @model_validator(mode="after")
    def _names_resolve(self) -> Self:
        for kind, items in (
            ("datasets", self.datasets),
            ("attributors", self.attributors),
            ("settings", self.settings),
        ):
            names = [item.name for item in items]
            twice = sorted({name for name in names if names.count(name) > 1})
            if twice:
                raise ValueError(f"{kind}: the names {twice} are used more than once")
        datasets = {item.name for item in self.datasets}
        settings = {item.name for item in self.settings}
        for attributor in self.attributors:
            for kind, wanted, known in (
                ("datasets", attributor.datasets, datasets),
                ("datasets", attributor.trained_on, datasets),
                ("settings", attributor.settings, settings),
            ):
                unknown = sorted(set(wanted or ()) - known)
                if unknown:
                    raise ValueError(
                        f"attributor {attributor.name!r} names {kind} {unknown} the suite"
                        f" does not define (defined: {sorted(known)})"
                    )
        return self

    @property
    def digest(self) -> str:
        """SHA-256 of the suite as parsed (comments and layout do not count)."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()

    def entries(self) -> list[Entry]:
        """Every (dataset, attributor, settings) the suite runs, dataset by dataset."""
        return [
            Entry(dataset, attributor, settings)
            for dataset in self.datasets
            for attributor in self.attributors
            if attributor.datasets is None or dataset.name in attributor.datasets
            for settings in self.settings
            if attributor.settings is None or settings.name in attributor.settings
        ]


@dataclass(frozen=True)
class Entry:
    """One (dataset, attributor, settings) of a suite."""

    dataset: DatasetDef
    attributor: AttributorDef
    settings: SettingsDef

    @property
    def key(self) -> str:
        return f"{self.dataset.name}/{self.attributor.name}/{self.settings.name}"

    def definition(self) -> dict[str, Any]:
        """What the entry is, as the history records it."""
        return {
            "dataset": self.dataset.model_dump(mode="json", exclude_none=True),
            "attributor": self.attributor.model_dump(mode="json", exclude_none=True),
            "settings": self.settings.model_dump(mode="json"),
        }


IN_SAMPLE = "in-sample"
"""The mark of an entry whose attributor was trained on its dataset."""


def in_sample(definition: Mapping[str, Any]) -> bool:
    """Whether an entry (its stored `Entry.definition`) scores its attributor on a dataset
    the attributor was trained on (`AttributorDef.trained_on`)."""
    dataset = definition.get("dataset", {}).get("name")
    return dataset in definition.get("attributor", {}).get("trained_on", ())


def endpoint_configured(attributor: AttributorDef, environ: Mapping[str, str]) -> bool:
    """Whether an LLM entry knows where its model is (the suite, or the environment)."""
    return attributor.base_url is not None or any(environ.get(v) for v in ENDPOINT_VARIABLES)


def load_suite(path: Path) -> Suite:
    """The suite in the TOML file `path`; SuiteError names the file and the key at fault."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SuiteError(f"{path}: cannot read the suite ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{path}: not valid TOML ({exc})") from None
    try:
        return Suite.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{_where(error['loc'])}: {_message(error)}" for error in exc.errors())
        raise SuiteError(f"{path}: {problems}") from None


def resolve_spec(spec: str, suite_dir: Path) -> str:
    """`spec` with each path part made absolute against the suite file's folder (named
    datasets are left as they are)."""
    parts = []
    for part in (piece.strip() for piece in spec.split(",")):
        if not part or part.lower() in DATASET_SPECS or Path(part).is_absolute():
            parts.append(part)
        else:
            parts.append(str((suite_dir / part).resolve()))
    return ",".join(part for part in parts if part)


def _where(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "the suite"


def _message(error: Mapping[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key"
    if error["type"] == "missing":
        return "required key missing"
    return str(error["msg"]).removeprefix("Value error, ")
