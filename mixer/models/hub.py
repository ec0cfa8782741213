"""Model sources on the Hugging Face hub: which names are hub ids, and fetching them.

A name is a hub id only when it cannot be a local path. Nothing of that name exists,
it is shaped `owner/name`, it does not start with `./`, `../`, `~` or `/`, and its
owner is not an existing directory. So `runs/quickstrat` (a typo, with runs/ on
disk) is a missing path, reported as such, and never a download of whatever
repository happens to carry that name. Every fetch says so before it starts.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Callable, Optional

from mixer.core.errors import UserError, first_line

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def is_hub_id(source: str) -> bool:
    """True when `source` names a hub repository: it cannot be a local path."""
    if os.path.exists(source) or not HUB_ID.fullmatch(source):
        return False
    owner, name = source.split("/")
    return name not in (".", "..") and not os.path.isdir(owner)


def check_local(source: str, source_flag: str, kind: str = "file or directory") -> None:
    """A local path that is not there: one line naming it (and why it is not a hub id)."""
    if os.path.exists(source) or is_hub_id(source):
        return
    parent = os.path.dirname(source.rstrip("/"))
    why = ""
    if HUB_ID.fullmatch(source) and parent and os.path.isdir(parent):
        why = f" ({parent}/ exists, so this is a local path, not a Hugging Face model id)"
    raise UserError(f"{source_flag} {source}: no such {kind}{why}")


def say(message: str) -> None:
    """A note on stderr from the first process only (torchrun starts one per GPU)."""
    if os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) == "0":
        print(message, file=sys.stderr, flush=True)


def announce(repo_id: str, log: Optional[Callable[[str], None]] = None) -> None:
    (log or say)(f"fetching Hugging Face model {repo_id}")


def fetch(
    repo_id: str,
    source_flag: str,
    log: Optional[Callable[[str], None]] = None,
    allow_patterns=("*.json", "*.safetensors"),
) -> str:
    """The local directory of a hub repository: from huggingface_hub's cache, or
    downloaded (HF_HUB_OFFLINE=1: the cache only)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise UserError(
            f"{source_flag} {repo_id}: fetching hub models needs huggingface_hub: "
            "pip install huggingface_hub"
        )
    announce(repo_id, log)
    try:
        return snapshot_download(repo_id, allow_patterns=list(allow_patterns))
    except Exception as exc:  # noqa: BLE001 - huggingface_hub raises many kinds
        raise UserError(
            f"{source_flag} {repo_id}: not in the Hugging Face cache and not downloadable "
            f"({first_line(exc, 160)}); download it where there is network (huggingface-cli "
            f"download {repo_id}), or pass a local directory"
        )
