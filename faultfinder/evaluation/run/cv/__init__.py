"""Cross-validation of the `learned` attributor (`faultfinder bench run --cv`): the folds
and settings (`folds`), training and scoring fold by fold (`crossval`), the summary over
seeds (`summary`) and its report (`report`)."""
