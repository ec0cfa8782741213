"""`python -m mixer.plot RUN_DIR`, kept at the name the README gives; the module lives
in mixer.reporting.plot."""

import sys

from mixer.cli.entrypoints import plot_main as main
from mixer.reporting.plot import plot_prediction_summary, plot_training_curves

__all__ = ["main", "plot_training_curves", "plot_prediction_summary"]

if __name__ == "__main__":
    sys.exit(main())
