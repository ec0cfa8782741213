"""Training: the run assembled from a configuration (run), the loop (trainer), the
learning-rate schedule. May import every layer below it; not mixer.prediction (its
sibling) or mixer.cli. Layers: docs/architecture.md."""
