"""From files to batches, in four folders by concept, each importing only itself and the
folders before it: tables (files in and out), labels (code systems, codes as spelled,
label checks, the key), prepared (a run's prepared data: the split, its fingerprint, the
files, preparing) and inputs (what the model reads: token ids, the token cache, noise,
batches). May import mixer.core and mixer.distributed. Layers: docs/architecture.md."""
