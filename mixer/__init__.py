"""mixer: fine-tune text classifiers for occupational codes, from one CPU to many GPUs.

    import mixer
    model = mixer.load("runs/quickstart")  # or an OccCANINE model or hub id
    model.predict(["farmer and fisher"], lang="en")
    model = mixer.finetune(frame, target_cols=["hisco_1"], save_path="runs/nb")  # as finetune.py
"""

__version__ = "0.2.0"


def load(source: str, device=None, precision: str = "fp32", force_precision: bool = False,
         tf32=None, code_descriptions=None):
    """A model to predict with: see mixer.api.load."""
    from mixer.api import load as _load

    return _load(source, device, precision, force_precision, tf32=tf32,
                 code_descriptions=code_descriptions)


def finetune(data, target_cols=None, initial_checkpoint=None, save_path=None, **options):
    """Fine-tune on one dataset as finetune.py does and return the model: see
    mixer.finetune_api.finetune."""
    from mixer.finetune_api import finetune as _finetune

    return _finetune(data, target_cols, initial_checkpoint, save_path, **options)


__all__ = ["load", "finetune", "__version__"]
