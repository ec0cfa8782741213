"""mixer: fine-tune text classifiers for occupational codes, from one CPU to many GPUs.

    import mixer
    model = mixer.load("runs/quickstart")  # or an OccCANINE model or hub id
    model.predict(["farmer and fisher"], lang="en")
"""

__version__ = "0.2.0"


def load(source: str, device=None, precision: str = "fp32", force_precision: bool = False,
         code_descriptions=None):
    """A model to predict with: see mixer.api.load."""
    from mixer.api import load as _load

    return _load(source, device, precision, force_precision, code_descriptions)


__all__ = ["load", "__version__"]
