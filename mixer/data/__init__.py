"""From files to batches: tables and formats, label checks and the key (prepare), code
systems (formatter), the model's input text and token ids (tokens, transliterate), the
token cache, training noise, resampling, the training inputs, dataset and sampler.
May import mixer.core and mixer.distributed. Layers: docs/architecture.md."""
