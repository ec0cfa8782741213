"""Where a run's model comes from, described without torch: a fresh encoder
(--encoder), or an earlier run (--initial-checkpoint). What is described here
(the input recipe, the run directory to read the architecture from) is what
`--prepare-only` needs to tokenise before any model exists."""

from __future__ import annotations

import os
from typing import Optional

from mixer.config import RunConfig
from mixer.tokens import InputRecipe


def run_dir_of(path: str) -> str:
    """The run directory of a run directory, or of a file inside one."""
    return path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))


def initial_run_dir(config: RunConfig) -> Optional[str]:
    return run_dir_of(config.model.initial_checkpoint) if config.model.initial_checkpoint else None


def input_recipe(config: RunConfig) -> InputRecipe:
    """How rows become the encoder's input in this run (stored in config.json)."""
    return InputRecipe(max_len=config.data.max_len)
