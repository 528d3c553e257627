"""Training the learned step scorer: labelled trajectories in, a `StepModel` file out.

`tune_and_fit` is the whole algorithm (`ensemble`): the labelled records become feature
matrices (`runs`), scorers are fitted on them (`fitting`: L-BFGS for linear scorers,
LightGBM for tree ensembles, one likelihood for both), and inner cross-validation on
the training records alone chooses what remains (`selection`). `faultfinder train`
(`command`) reads the records and writes the model; `faultfinder bench learning-curve`
(`learning_curve`) measures held-out accuracy against the number of labelled runs. The
learned attributor's inference (features, scorers, the model file) stays in
`faultfinder.attributors.learned`.

numpy, scipy and lightgbm (the `train` extra) are imported only by the functions that
fit or score in batches; importing this package needs none of them.
"""

from faultfinder.training.ensemble import (
    GROUP_MIN_RECORDS,
    TrainingOptions,
    tune_and_fit,
)
from faultfinder.training.fitting import (
    DEFAULT_GRID,
    ModelConfig,
    batch_scores,
    fit_ensemble,
    fit_scorer,
    out_of_fold_scores,
)
from faultfinder.training.runs import (
    FOLDS_BY,
    FeatureCache,
    GoldStep,
    LabelledRecord,
    RunMatrix,
    record_folds,
    stratified_folds,
    task_key,
)
from faultfinder.training.selection import (
    TEMPERATURES,
    beats_by_one_standard_error,
    choose_alarm_threshold,
    choose_temperature,
    first_alarm,
    predicted_agent,
    run_correct,
    run_utilities,
)

__all__ = [
    "DEFAULT_GRID",
    "FOLDS_BY",
    "GROUP_MIN_RECORDS",
    "TEMPERATURES",
    "FeatureCache",
    "GoldStep",
    "LabelledRecord",
    "ModelConfig",
    "RunMatrix",
    "TrainingOptions",
    "batch_scores",
    "beats_by_one_standard_error",
    "choose_alarm_threshold",
    "choose_temperature",
    "first_alarm",
    "fit_ensemble",
    "fit_scorer",
    "out_of_fold_scores",
    "predicted_agent",
    "record_folds",
    "run_correct",
    "run_utilities",
    "stratified_folds",
    "task_key",
    "tune_and_fit",
]
