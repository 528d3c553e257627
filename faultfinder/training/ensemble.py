"""The whole training algorithm (`tune_and_fit`): labelled records in, a `StepModel` out.

The scorer is the mean of one model per config of the grid; inner CV on the training
records alone chooses the agent rule, the per-framework models, the temperatures, the
conformal calibration and the auditor's prefix-only model and alarm thresholds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from faultfinder.attributors.conformal import CalibrationExample, calibrate
from faultfinder.attributors.learned.blame import softmax
from faultfinder.attributors.learned.features import feature_names
from faultfinder.attributors.learned.step_model import CONVERSATION, AgentRule, StepModel
from faultfinder.training.fitting import (
    DEFAULT_GRID,
    ModelConfig,
    fit_ensemble,
    out_of_fold_scores,
)
from faultfinder.training.runs import FeatureCache, LabelledRecord, RunMatrix
from faultfinder.training.selection import (
    beats_by_one_standard_error,
    choose_alarm_threshold,
    choose_temperature,
    run_utilities,
)

__all__ = ["GROUP_MIN_RECORDS", "TrainingOptions", "tune_and_fit"]


GROUP_MIN_RECORDS = 20
"""A framework gets choices of its own (a model trained on its runs only, agent rule,
temperature, alarm threshold) only with at least this many training runs."""


@dataclass(frozen=True)
class _Choice:
    """The scorer chosen for a set of runs (pooled or trained on the group's runs only),
    its agent rule and its inner out-of-fold scores."""

    rule: str
    scores: dict[int, list[float]]
    """Inner out-of-fold scores by run position (of the runs it was judged on)."""
    utilities: dict[str, list[float]]
    """Agent rule -> per-run utility (`run_utilities`) on the runs it was judged on."""
    own_group: bool = False
    """Trained on the group's runs only (else on all runs)."""

    @classmethod
    def judge(
        cls,
        runs: Sequence[RunMatrix],
        positions: Sequence[int],
        scores: dict[int, list[float]],
        rules: Sequence[str],
        own_group: bool = False,
    ) -> _Choice:
        """The agent rule of `rules` with the best mean utility on `positions` (ties: the
        first)."""
        judged = [runs[i] for i in positions]
        subset = [scores[i] for i in positions]
        utilities = {rule: run_utilities(judged, subset, rule) for rule in rules}
        rule = max(rules, key=lambda r: (sum(utilities[r]), -rules.index(r)))
        return cls(rule, scores, utilities, own_group)

    @property
    def where(self) -> str:
        return "group-only" if self.own_group else "pooled"

    def label(self) -> str:
        return f"{self.where} ensemble / {self.rule}"

    def report(self) -> dict[str, float]:
        """Mean inner-CV utility per agent rule."""
        return {f"{self.where} / {rule}": sum(u) / len(u) for rule, u in self.utilities.items()}


def _scores_by_position(
    runs: Sequence[RunMatrix],
    positions: Sequence[int],
    configs: Sequence[ModelConfig],
    k: int,
    seed: int,
) -> dict[int, list[float]]:
    scores = out_of_fold_scores([runs[i] for i in positions], configs, k, seed)
    return dict(zip(positions, scores, strict=True))


@dataclass(frozen=True)
class TrainingOptions:
    """What `tune_and_fit` trains and how it chooses."""

    grid: Sequence[ModelConfig] = DEFAULT_GRID
    """The configs whose models the scorer averages."""
    inner_folds: int = 3
    """Folds of the inner cross-validation on the training records."""
    seed: int = 0
    use_ground_truth: bool = True
    """Compute the ground-truth features (else they are 0)."""
    auditor: bool = True
    """Also fit the auditor's prefix-only model and its alarm thresholds."""
    per_group: bool = True
    """Let frameworks with enough runs get choices of their own."""
    agent_rules: Sequence[str] = (AgentRule.TOP_STEP,)
    """The agent rules inner CV chooses from."""


def tune_and_fit(
    records: Sequence[LabelledRecord],
    *,
    cache: FeatureCache,
    options: TrainingOptions = TrainingOptions(),
    on_step: Callable[[str], None] | None = None,
) -> StepModel:
    """Fit the ensemble of every config in `options.grid` on `records` and choose, by
    inner CV on `records` only, what remains to choose.

    The scorer is the mean of one model per config (`fit_ensemble`): averaging the
    candidates instead of picking one by inner CV, whose pick on a few hundred runs is
    mostly noise (on Who&When the picked model scored below every candidate it was
    picked from). The inner out-of-fold scores of the ensemble choose the agent rule,
    the softmax temperature (by likelihood) and calibrate the conformal sets. With
    `per_group`, each framework with at least `GROUP_MIN_RECORDS` runs also gets an
    ensemble trained on its runs only, which replaces the pooled one for that framework
    when it is better on that framework's runs by more than one standard error
    (`beats_by_one_standard_error`), and an agent rule, temperature and alarm threshold
    of its own. The auditor's prefix-only ensemble gets its alarm threshold the same
    way. Nothing outside `records` is looked at.
    """
    configs = tuple(options.grid)
    if not configs:
        raise ValueError("no configs to train")
    runs = cache.matrices(records, use_ground_truth=options.use_ground_truth, prefix_only=False)
    everyone = list(range(len(runs)))
    step = on_step or (lambda _: None)
    rules = tuple(options.agent_rules)

    members: dict[str, list[int]] = {}
    for i, run in enumerate(runs):
        if run.group is not None:
            members.setdefault(run.group, []).append(i)
    # Frameworks with enough training runs get choices of their own.
    own_groups = {
        group: positions
        for group, positions in sorted(members.items())
        if options.per_group and len(positions) >= max(GROUP_MIN_RECORDS, 2 * options.inner_folds)
    }
    # Conversations with a model of their own leave the pooled model to the task runs:
    # trained on both, the pooled model lost 3 points of step accuracy on held-out
    # frameworks' task runs (reports/conversations.md).
    apart = 0 < len(own_groups.get(CONVERSATION, ())) < len(runs)
    tasks = [i for i in everyone if runs[i].group != CONVERSATION] if apart else everyone
    step("pooled ensemble")
    pooled = _Choice.judge(
        runs,
        tasks,
        _scores_by_position(runs, tasks, configs, options.inner_folds, options.seed),
        rules,
    )
    report: dict[str, dict[str, float]] = {"*": pooled.report()}
    # What a conversation's own model is measured against: one trained on every run.
    every_run = (
        _scores_by_position(runs, everyone, configs, options.inner_folds, options.seed)
        if apart
        else pooled.scores
    )

    group_choices: dict[str, _Choice] = {}
    for group, positions in own_groups.items():
        step(f"{group}: ensemble on its runs only")
        shared = _Choice.judge(
            runs, positions, every_run if group == CONVERSATION else pooled.scores, rules
        )
        own = _Choice.judge(
            runs,
            positions,
            _scores_by_position(runs, positions, configs, options.inner_folds, options.seed),
            rules,
            own_group=True,
        )
        gains = [
            o - p
            for o, p in zip(own.utilities[own.rule], shared.utilities[shared.rule], strict=True)
        ]
        group_choices[group] = own if beats_by_one_standard_error(gains) else shared
        report[group] = {**shared.report(), **own.report()}

    def chosen_for(run: RunMatrix) -> _Choice:
        return group_choices.get(run.group or "", pooled)

    step("fitting the ensemble on every record")
    scorer = fit_ensemble([runs[i] for i in tasks], configs, options.seed)
    temperature = choose_temperature([runs[i] for i in tasks], [pooled.scores[i] for i in tasks])
    groups: dict[str, StepModel] = {}
    temperatures: dict[str, float] = {}
    for group, choice in group_choices.items():
        positions = members[group]
        group_runs = [runs[i] for i in positions]
        temperatures[group] = choose_temperature(group_runs, [choice.scores[i] for i in positions])
        if choice.own_group:
            group_scorer = fit_ensemble(group_runs, configs, options.seed)
        elif group == CONVERSATION and apart:
            group_scorer = fit_ensemble(runs, configs, options.seed)
        elif choice.rule == pooled.rule and temperatures[group] == temperature:
            continue
        else:
            group_scorer = scorer
        groups[group] = StepModel(
            features=feature_names(),
            scorer=group_scorer,
            agent_rule=choice.rule,
            temperature=temperatures[group],
            training={"choice": choice.label()},
        )
    conformal = calibrate(
        CalibrationExample(
            softmax(
                chosen_for(run).scores[i],
                temperatures.get(run.group or "", temperature),
                run.blameable,
            ),
            run.gold_step,
            run.group,
        )
        for i, run in enumerate(runs)
    )
    audit_model = None
    if options.auditor:
        step("auditor: prefix-only ensemble")
        audit_records = [records[i] for i in tasks]
        renumbered = {i: n for n, i in enumerate(tasks)}
        audit_groups = {
            group: [renumbered[i] for i in positions]
            for group, positions in own_groups.items()
            if group != CONVERSATION or not apart
        }
        audit_model = _fit_auditor(audit_records, cache, configs, audit_groups, options)
    return StepModel(
        features=feature_names(),
        scorer=scorer,
        agent_rule=pooled.rule,
        temperature=temperature,
        conformal=conformal,
        auditor=audit_model,
        groups=groups,
        training={
            "records": len(records),
            "seed": options.seed,
            "use_ground_truth": options.use_ground_truth,
            "inner_folds": options.inner_folds,
            "configs": [asdict(config) for config in configs],
            "group_choices": {group: c.label() for group, c in group_choices.items()},
            "inner_cv_utility": report,
        },
    )


def _fit_auditor(
    records: Sequence[LabelledRecord],
    cache: FeatureCache,
    configs: Sequence[ModelConfig],
    own_groups: dict[str, list[int]],
    options: TrainingOptions,
) -> StepModel:
    """The auditor's prefix-only ensemble, with an alarm threshold chosen on its inner
    out-of-fold scores, pooled and per framework of `own_groups`."""
    prefix_runs = cache.matrices(
        records, use_ground_truth=options.use_ground_truth, prefix_only=True
    )
    prefix_scores = out_of_fold_scores(prefix_runs, configs, options.inner_folds, options.seed)
    threshold = choose_alarm_threshold(prefix_runs, prefix_scores)
    # Per framework (as the conformal sets): the first alarm's hit rate and the
    # share of runs that alarm differ widely between frameworks, so one pooled
    # threshold over-alarms on some.
    thresholds = {
        group: choose_alarm_threshold(
            [prefix_runs[i] for i in positions], [prefix_scores[i] for i in positions]
        )
        for group, positions in own_groups.items()
    }
    return StepModel(
        features=feature_names(prefix_only=True),
        scorer=fit_ensemble(prefix_runs, configs, options.seed),
        prefix_only=True,
        alarm_threshold=threshold,
        alarm_thresholds=thresholds,
        training={"configs": [asdict(config) for config in configs]},
    )
