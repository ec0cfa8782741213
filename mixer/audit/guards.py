"""What the audit asks of the data layer (mixer.data.tables.guards.Guards): a filled audit is
never replaced by an output (mixer.audit.verdicts), and an audit's rows train only with
--train-on-audit (mixer.audit.train_on). GUARDS is passed down by every layer above the audit
that writes an output or prepares a run's data (the programs, the prediction job and its
sinks, the training run). Light: the audit's modules are imported when a check runs, not here.
"""

from __future__ import annotations

from mixer.data.tables.guards import Guards


def refuse_filled_audit(path: str, flag: str) -> None:
    from mixer.audit.verdicts import refuse_filled_audit as refuse

    refuse(path, flag)


def refuse_audit_rows(frame, path: str, flag: str, cfg) -> None:
    from mixer.audit.train_on import refuse_audit_rows as refuse

    refuse(frame, path, flag, cfg.train_on_audit)


def training_table(table, path: str, cfg):
    from mixer.audit.train_on import training_table as rows

    return rows(table, path, cfg.train_on_audit)  # an audit: refused, or its checked rows


GUARDS = Guards(
    output=refuse_filled_audit, training_table=refuse_audit_rows, extra_train=training_table
)
