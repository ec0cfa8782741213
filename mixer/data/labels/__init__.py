"""Codes and labels: code systems (formatter), codes as the code system spells them and
the model's input text (normalise), the columns of checked rows (columns), the label
checks (checks), the key and its descriptions (key), and rows a person checked, fed back
(checking). Imports data/tables/ below it. Layers: docs/architecture.md."""
