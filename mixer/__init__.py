"""mixer: fine-tune text classifiers for occupational codes, from one CPU to many GPUs."""

__version__ = "0.1.0"
