"""mixer.dataset, kept at the name the README gives (`from mixer.dataset import
StepSampler`); the module lives in mixer.data.inputs.dataset."""

from mixer.data.inputs.dataset import (
    Batch,
    Collator,
    RowDataset,
    StepSampler,
    eval_batches,
    shard_indices,
)

__all__ = ["Batch", "Collator", "RowDataset", "StepSampler", "eval_batches", "shard_indices"]
