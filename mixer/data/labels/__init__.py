"""Codes and labels: code systems (formatter), codes as the code system spells them and
the model's input text (normalise), and rows a person checked, fed back (checking).
Imports data/tables/ below it. Layers: docs/architecture.md."""
