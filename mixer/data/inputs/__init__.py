"""What the model reads: text to token ids (tokens, transliterate), the run's token
cache, training noise, resampling, the training inputs a step draws, padding, and the
dataset, sampler and collator. Imports data/tables/, data/labels/ and data/prepared/
below it. Layers: docs/architecture.md."""
