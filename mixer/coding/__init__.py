"""Coding at a stated accuracy, one feature (docs/coding.md). Its statistics: a row's
confidence, calibration, the production curve, the threshold that keeps a stated accuracy
on new rows (guarantee), and shorter codes (levels). What uses them: the threshold chosen on
labelled rows (target) as a caller asks for it (targeting), lookup tables (lookup), the row
steps after the model as one object (pipeline), predict.py --calibrate (calibrate), the
file's provenance (provenance), predict.py's coding duties (job), a run's scores and
calibration at its end (scores) and evaluate.py's production curve (production). It asks a
model only what it does (a Predictor or Model passed in); mixer.prediction and
mixer.training call it. May import every layer up to mixer.audit. Layers:
docs/architecture.md."""
