"""--to-check N FILE as a sink (mixer.prediction.sink.Sink): the rows a person should check.
Its state (Sink.state_dict) is its pieces beside the resume journal.
"""

from __future__ import annotations

import sys
from typing import Optional

from mixer.audit.guards import GUARDS  # a filled audit: no output replaces it
from mixer.prediction.sink import Sink


class CheckListSink(Sink):
    """--to-check N FILE: the rows a person should check (mixer.data.labels.checking.CheckList)."""

    flag, field, usage, reads, rank = (
        "--to-check",
        "to_check",
        "--to-check N FILE",
        frozenset({"codes"}),
        3,
    )

    @classmethod
    def cells(cls, config, columns) -> Optional[list]:
        return [columns.input_col, columns.language_col, *columns.context_cols]

    @classmethod
    def check(cls, config) -> None:
        from mixer.data.labels.checking import parse_to_check
        from mixer.data.tables.sinks import refuse_shaped

        if not config.outputs.to_check:
            return
        parse_to_check(config.outputs.to_check)
        refuse_shaped(config, "--to-check", "lists codes of the code table")

    def __init__(self, job):
        from mixer.data.labels.checking import CheckList, parse_to_check

        config, columns = job.config, job.columns
        self.count, self.path = parse_to_check(config.outputs.to_check)
        keys = (
            [columns.input_col]
            + ([columns.language_col] if columns.language_col else [])
            + columns.context_cols
        )
        prefix, slots = (
            "" if len(config.coding.head) == 1 else f"{config.coding.head[0]}_",
            config.coding.top_k or job.predictor.default_top_k(),
        )
        self.checklist = CheckList(
            self.count,
            self.path,
            keys,
            prefix,
            slots,
            log=job.say,
            stamp=job.started,
            extra=class_names(job, prefix),
            guards=GUARDS,
        )
        self.journal, self.saved = job.journal, (0, 0)  # its pieces beside a resume journal (state)

    def file(self) -> tuple:
        return "--to-check", self.path

    def add(self, job, part) -> None:
        keep = job.coding.check_rows(part.predicted, job.config.coding.head)
        self.checklist.add(part.chunk, part.predicted, part.inputs, keep=keep)

    def state_dict(self) -> dict:
        from mixer.data.tables.sinks import save_pieces

        self.saved = save_pieces(self.journal, "to-check", self.checklist.parts, self.saved)
        return {
            "pieces": self.saved,
            "rows": self.checklist.rows,
            "described": self.checklist.described,
        }

    def load_state_dict(self, state: dict) -> None:
        from mixer.data.tables.sinks import load_pieces

        self.saved = state["pieces"]
        self.checklist.parts = load_pieces(self.journal, "to-check", self.saved)
        self.checklist.rows, self.checklist.described = state["rows"], state["described"]

    def commit(self, job) -> None:
        from mixer.data.labels.checking import describe

        listed = self.checklist.commit()
        print(self.checklist.empty or describe(self.path, listed, self.count), file=sys.stderr)

    def abort(self) -> None:
        self.checklist.abort()


def class_names(job, prefix: str) -> list:
    """The class columns of the job's crosswalks (mixer.prediction.classes) for one head's
    codes, as the code table names them."""
    if job.classes is None:
        return []
    from mixer.data.labels.crosswalk import class_columns

    slots = job.config.coding.top_k or job.predictor.default_top_k()
    return [name for walk in job.classes.walks for name in class_columns(walk, slots, prefix)]
