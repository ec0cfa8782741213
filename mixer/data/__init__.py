"""From files to batches, in folders by concept: tables (files in and out), labels (code
systems, codes as spelled), preparing (prepare: label checks, the key, the split, the
prepared files) and inputs (what the model reads: token ids, the token cache, noise,
batches). May import mixer.core and mixer.distributed. Layers: docs/architecture.md."""
