"""Tables in and out: every file a program reads comes through one reader (reading, with
formats for Excel and Stata), every frame it writes goes out through writing; the checks a
feature above registers on those paths (guards), and the outputs of a prediction job
(sinks). The lowest of data/'s folders: it imports mixer.core alone.
Layers: docs/architecture.md."""
