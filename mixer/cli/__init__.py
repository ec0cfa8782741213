"""The programs: flag parsing (parsing), the mains of finetune.py, train_mixer.py,
predict.py and evaluate.py (entrypoints), mixer.finetune (finetune_api, which runs
finetune.py's main) and the OccCANINE export. The top layer: it may import every
other. Layers: docs/architecture.md."""
