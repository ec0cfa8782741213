"""The bottom layer: what every other layer may use. The programs' configurations
(config and programs, each field an option: options; recipe, the one owner of the values
a flag left out takes), user-facing errors, atomic file writes, optional extras, numeric
precision. Imports nothing of mixer's outside this folder. Layers: docs/architecture.md."""
