"""A run's prepared data: the split (split), the fingerprint of what it was prepared from
(fingerprint), the prepared files in the run directory (files), and preparing itself
(prepare: read, check, key, split, write). Imports data/tables/ and data/labels/ below it.
Layers: docs/architecture.md."""
