"""The programs: their flags, generated from the configurations (options), --config
and how a program ends on an error (parsing), the mains of finetune.py, train_mixer.py,
predict.py and evaluate.py (entrypoints), mixer.finetune (finetune_api) and the
OccCANINE export. The top layer: it may import every other. Layers: docs/architecture.md."""
