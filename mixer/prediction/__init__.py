"""Prediction: the predictor, the shapes of its outputs, predict.py's file job and the
Python API (mixer.load). May import every layer below it; not mixer.training (its
sibling) or mixer.cli. Layers: docs/architecture.md."""
