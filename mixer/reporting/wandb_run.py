"""One W&B run per training job, resumed with the same id when the job resumes."""

from __future__ import annotations

import os
import secrets

from mixer.core.errors import UserError

ID_FILE = "wandb_id.txt"


def start_wandb(run_dir: str, config: dict, project: str, mode: str):
    try:
        import wandb
    except ImportError:
        raise UserError("--log-wandb needs the wandb package: pip install 'mixer[wandb]'")
    id_path = os.path.join(run_dir, ID_FILE)
    if os.path.exists(id_path):
        with open(id_path) as handle:
            run_id = handle.read().strip()
    else:
        run_id = secrets.token_hex(4)
        with open(id_path, "w") as handle:
            handle.write(run_id)
    # a WANDB_DIR the user set wins, as in wandb itself and the Hugging Face Trainer
    directory = os.environ.get("WANDB_DIR") or run_dir
    os.makedirs(directory, exist_ok=True)
    return wandb.init(
        project=project,
        id=run_id,
        resume="allow",
        mode=mode,
        dir=directory,
        name=os.path.basename(os.path.abspath(run_dir)),
        config=config,
    )
