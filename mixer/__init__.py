"""mixer: fine-tune text classifiers for occupational codes, from one CPU to many GPUs.

import mixer
model = mixer.load("runs/quickstart")  # or an OccCANINE model or hub id
model.predict(["farmer and fisher"], lang="en")
model = mixer.finetune(frame, target_cols=["hisco_1"], save_path="runs/nb")  # as finetune.py
"""

from mixer.version import __version__  # noqa: F401 - a leaf module (mixer/version.py)

# The package's folders are its layers (docs/architecture.md). A few modules keep the
# names users were given before the folders existed: mixer.errors (UserError, imported
# here so that `except mixer.errors.UserError` needs no import of its own), mixer.api,
# mixer.dataset, and the programs `python -m mixer.plot` and `python -m mixer.export_occcanine`.
from mixer import errors  # noqa: E402,F401


def load(
    source: str,
    device=None,
    precision: str = "fp32",
    force_precision: bool = False,
    tf32=None,
    code_descriptions=None,
    quantize=None,
):
    """A model to predict with: see mixer.prediction.api.load."""
    from mixer.api import load as _load  # the alias: `mixer.api.Model` after a load, as before

    return _load(
        source,
        device,
        precision,
        force_precision,
        tf32=tf32,
        code_descriptions=code_descriptions,
        quantize=quantize,
    )


def finetune(data, target_cols=None, initial_checkpoint=None, save_path=None, **options):
    """Fine-tune on one dataset as finetune.py does and return the model: see
    mixer.cli.finetune_api.finetune."""
    from mixer.cli.finetune_api import finetune as _finetune

    return _finetune(data, target_cols, initial_checkpoint, save_path, **options)


__all__ = ["load", "finetune", "__version__"]
