"""What the audit asks of the data layer, registered with mixer.data.tables.guards: a filled
audit is never replaced by an output (mixer.audit.verdicts), and an audit's rows train only
with --train-on-audit (mixer.audit.train_on). mixer/__init__.py calls register(), so every
program and every import of mixer has them. Light: the audit's modules are imported when
a check runs, not here.
"""

from __future__ import annotations

from mixer.data.tables import guards


def refuse_filled_audit(path: str, flag: str) -> None:
    from mixer.audit.verdicts import refuse_filled_audit as refuse

    refuse(path, flag)


def refuse_audit_rows(frame, path: str, flag: str, cfg) -> None:
    from mixer.audit.train_on import refuse_audit_rows as refuse

    refuse(frame, path, flag, cfg.train_on_audit)


def training_table(table, path: str, cfg):
    from mixer.audit.train_on import training_table as rows

    return rows(table, path, cfg.train_on_audit)  # an audit: refused, or its checked rows


def register() -> None:
    guards.protect_outputs(refuse_filled_audit)
    guards.check_training_tables(refuse_audit_rows)
    guards.read_extra_train_with(training_table)
