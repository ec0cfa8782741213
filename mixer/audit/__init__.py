"""The audit, one feature. A random sample of predictions drawn for a person to check by
hand (draw), its file's columns and design (file). It is read back with its verdicts and never
overwritten (verdicts), turned into an accuracy with 95% intervals (statistics, scores),
and trained on only when asked (train_on). guards registers what it needs of the data
layer. May import every layer up to mixer.reporting. Layers: docs/architecture.md."""
