"""Numbers and pictures: metrics as sums, the evaluation table, trackers (logs.csv, W&B,
TensorBoard), plots. May import every layer below it (core, distributed, data, models).
Layers: docs/architecture.md."""
