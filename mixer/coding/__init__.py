"""Which predictions to use as they are: row confidence, calibration, the production
curve, a threshold that keeps a stated accuracy on new rows, and shorter codes
(docs/coding.md)."""
