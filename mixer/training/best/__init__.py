"""The best model of a run: the rule and the keeper (keeper), and the hook that keeps it
during a run and finishes it at the end (hook). RUN/best/ on disk, written whole, and
how prediction reads it stay in mixer.models (model_dir, sources): prediction reads
them too, and it may not import training."""
