#!/usr/bin/env python
"""A simulation of the hand check of an audit, for examples and tests: it fills
true_code_1.. of an audit file (predict.py --audit, unit rows) from columns of that file
that already hold the right codes, as when the predicted rows came with their codes (held
back rows). A real audit is filled by a person who reads each row.

  python scripts/simulate_audit_check.py audit.csv --truth-cols hisco_1
  python scripts/simulate_audit_check.py audit.csv --truth-cols hisco_1 --rows 150   # the rest left blank

The file is rewritten in place, in its own format (.csv, .xlsx, .parquet).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> int:
    from mixer.cli.parsing import Parser, positive_int
    from mixer.core.config import TableOptions
    from mixer.core.errors import UserError
    from mixer.audit import file as audit_file
    from mixer.audit import verdicts
    from mixer.data.tables.reading import as_text, read_table, require_columns
    from mixer.data.tables.writing import write_table

    parser = Parser(prog="simulate_audit_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("audit", help="the audit file predict.py --audit wrote")
    parser.add_argument(
        "--truth-cols",
        dest="truth_cols",
        nargs="+",
        required=True,
        metavar="COL",
        help="columns of the audit that hold the right codes, e.g. hisco_1",
    )
    parser.add_argument(
        "--rows",
        type=positive_int,
        default=None,
        help="check only the first ROWS rows (from the top, as a person would); "
        "the others stay blank",
    )
    args = parser.parse_args(argv)
    frame = read_table(args.audit, TableOptions(role="audit"))
    audit = verdicts.parse_audit(frame, args.audit, "audit")
    if audit.design.unit != "rows":
        raise UserError(f"{args.audit}: an audit of descriptions has no row's own codes to copy")
    require_columns(
        frame, args.truth_cols, args.audit, {c: "--truth-cols" for c in args.truth_cols}
    )
    checked = len(frame) if args.rows is None else min(args.rows, len(frame))
    for k, column in enumerate(args.truth_cols):
        filled = as_text(frame[column]).str.strip()
        frame[audit_file.TRUE_CODE.format(k + 1)] = filled.where(frame.index < checked, "")
    write_table(frame, args.audit, "audit")
    print(
        f"{args.audit}: true_code_1.. of {checked} of {len(frame)} rows filled from "
        f"{', '.join(args.truth_cols)} (a simulation of the hand check)"
    )
    return 0


if __name__ == "__main__":
    from mixer.cli.parsing import run_main

    run_main(main)
