"""--summary-plot FILE as a sink (mixer.prediction.sink.Sink): the first code's probabilities
drawn over the whole file. Its state (Sink.state_dict) is its pieces beside the resume journal.
"""

from __future__ import annotations

import os

from mixer.core.errors import UserError
from mixer.prediction.sink import Sink


class SummaryPlotSink(Sink):
    """--summary-plot FILE: the first code's probabilities drawn over the whole file."""

    flag, field, reads = "--summary-plot", "summary_plot", frozenset({"codes"})

    @classmethod
    def check(cls, config) -> None:
        if not config.outputs.summary_plot:
            return
        if not config.outputs.summary_plot.lower().endswith((".png", ".pdf", ".svg", ".jpg")):
            raise UserError(
                f"--summary-plot {config.outputs.summary_plot}: name it .png, .pdf, .svg or .jpg"
            )

    def __init__(self, job):
        self.pieces, self.journal, self.saved = [], job.journal, (0, 0)
        self.path = job.config.outputs.summary_plot

    def file(self) -> tuple:
        return "--summary-plot", self.path

    def add(self, job, part) -> None:
        first = "" if len(job.config.coding.head) == 1 else f"{job.config.coding.head[0]}_"
        self.pieces.append(
            part.predicted[[f"{first}code_1", f"{first}prob_1"]].set_axis(
                ["code_1", "prob_1"], axis=1
            )
        )

    def state_dict(self) -> tuple:
        from mixer.data.tables.sinks import save_pieces

        self.saved = save_pieces(self.journal, "summary-plot", self.pieces, self.saved)
        return self.saved

    def load_state_dict(self, state: tuple) -> None:
        from mixer.data.tables.sinks import load_pieces

        self.saved = state
        self.pieces = load_pieces(self.journal, "summary-plot", state)

    def commit(self, job) -> None:
        if self.pieces:
            import pandas as pd

            from mixer.reporting.plot import plot_prediction_summary

            from mixer.core.io import atomic_write, write_target

            frame = pd.concat(self.pieces, ignore_index=True)
            kind = os.path.splitext(self.path)[1].lower().lstrip(".")
            # whole or not at all: a full disk leaves the file as it was (a temp file's name
            # has no suffix to tell the format by)
            atomic_write(
                write_target(self.path),
                lambda tmp: plot_prediction_summary(frame, tmp, fmt=kind, stamp=job.started),
            )
