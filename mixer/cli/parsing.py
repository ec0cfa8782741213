"""Command-line parsing shared by the entry points.

Every entry point builds its parser from the groups here, so a flag has one
name, one default and one help text everywhere. `build_config` turns the
parsed namespace into a RunConfig; nothing past this module sees argparse.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import traceback
from typing import Callable, Optional, Sequence

from mixer import __version__
from mixer.core import extras
from mixer.core.config import (
    BEST_METRICS, NEW_HEADS, NON_PERSISTED, OWN_OPTION_DESTS, SCORE_COLUMNS, TABLE_ROLES, DataConfig,
    DistConfig, LogConfig, ModelConfig, RunConfig, TrainConfig,
)
from mixer.core.errors import PeerFailed, UserError, first_line

SECTIONS = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig,
            "dist": DistConfig, "log": LogConfig}


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit status 2."""

    def error(self, message: str):  # noqa: D401 - argparse hook
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# ----------------------------------------------------------------- validators
def _whole_number(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {least} or more, got {value}")
    return value


def positive_int(text: str) -> int:
    return _whole_number(text, 1)


def non_negative_int(text: str) -> int:
    return _whole_number(text, 0)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}")


def positive_float(text: str) -> float:
    value = _float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def unit_interval(text: str) -> float:
    value = _float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def open_unit_interval(text: str) -> float:
    value = _float(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be strictly between 0 and 1, got {text}")
    return value


# ------------------------------------------------------------------- groups
def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action="version", version=f"mixer {__version__}")
    parser.add_argument("--config", metavar="YAML",
                        help="read flags from a YAML file (an args.yaml of an earlier run works); "
                             "flags given on the command line win")


def add_input_text_args(group, with_language=True) -> None:
    group.add_argument("--input-col", dest="input_col", default="occ1",
                       help="column with the text to classify (default: %(default)s)")
    group.add_argument("--context-cols", dest="context_cols", nargs="+", default=[], metavar="COL",
                       help="more columns the model reads after the text, e.g. relation "
                            "industry: 'title [SEP] relation: wife [SEP] industry: coal' "
                            "(empty cells are left out; see docs/data.md)")
    if with_language:
        group.add_argument("--language", default="unk",
                           help="language of every row, e.g. en (default: %(default)s = unknown); "
                                "the model sees '<lang>[SEP]<text>' when it is known")
        group.add_argument("--language-col", dest="language_col", default=None,
                           help="column with a language per row (instead of --language)")


def encoding_name(text: str) -> str:
    from mixer.data.reading import canonical_encoding

    try:
        return canonical_encoding(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc))


def separator(text: str) -> str:
    named = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "pipe": "|"}
    value = named.get(text.lower(), text)
    if len(value) != 1 or value in "\"\r\n":
        raise argparse.ArgumentTypeError(f"expected one character such as , ; | or tab, got {text!r}")
    return value


def add_table_args(group, role: str = "dataset") -> None:
    """How a role's files are read (mixer.core.config.TABLE_ROLES): the main data's
    --encoding, --sep, --sheet and --header-row, or a role's own (--key-encoding, ...).
    Each file is read with its own role's options only; nothing is shared between roles,
    and a role's options apply to each of its files (--train-data A B: --encoding reads both)."""
    what, prefix = TABLE_ROLES[role]
    files = "input" if role in ("dataset", "input", "predictions") else f"the {what} file(s)"
    default_encoding = None if prefix else "utf-8"
    group.add_argument(f"--{prefix}encoding", type=encoding_name, default=default_encoding,
                       help=f"text encoding of CSV {files}, e.g. cp1252 (Windows), latin-1, utf-16 "
                            "(default: utf-8; a byte-order mark is accepted). Never guessed: a file "
                            "that does not decode is an error showing the first bad row")
    group.add_argument(f"--{prefix}sep", type=separator, default=None,
                       help=f"separator of CSV {files}: , ; | or tab (default: the one a first line "
                            "'sep=;' names, else the one the header line uses, printed at the start)")
    group.add_argument(f"--{prefix}sheet", default=None, metavar="NAME",
                       help=f"Excel {files}: the worksheet to read (default: the first)")
    group.add_argument(f"--{prefix}header-row", type=positive_int, default=None, metavar="N",
                       help=f"CSV and Excel {files}: the row that holds the column names, counted "
                            "from 1 as a spreadsheet shows rows; the rows above it (a title) are "
                            "skipped (default: the first row that is not empty)")


def add_code_args(group) -> None:
    group.add_argument("--block-size", dest="block_size", type=positive_int, default=5,
                       help="characters per code (default: %(default)s)")
    group.add_argument("--use-within-block-sep", dest="use_within_block_sep", action=argparse.BooleanOptionalAction, default=False,
                       help="codes are comma-separated parts (e.g. '1,12,0'); each part is one "
                            "token and --block-size counts parts")
    group.add_argument("--drop-bad-labels", dest="drop_bad_labels", action=argparse.BooleanOptionalAction, default=False,
                       help="drop rows with invalid codes instead of stopping with an error")
    group.add_argument("--zero-padded-codes", dest="zero_padded_codes",
                       action=argparse.BooleanOptionalAction, default=False,
                       help="digit codes are --block-size digits, zero-padded (as HISCO's 01110): a "
                            "shorter one lost its leading zeros and gets them back ('1110' -> "
                            "'01110'), and the run says how many (hisco and occ1950 always do so)")
    group.add_argument("--allow-codes-shorter-than-block-size",
                       dest="allow_codes_shorter_than_block_size", action=argparse.BooleanOptionalAction, default=False,
                       help="accept codes shorter than --block-size as written, for code systems "
                            "whose codes have several lengths (codes that lost leading zeros: "
                            "--zero-padded-codes; the digit codes of a column stored as numbers get "
                            "theirs back anyway); one number written with and without zeros "
                            "('1110', '01110') is refused")
    group.add_argument("--key", dest="key_file", default=None, metavar="FILE",
                       help="a fixed, complete list of codes (a table with a column 'code', and "
                            "optionally 'description', or the HISCO key layout; a run's key.csv "
                            "works): the key is these codes in this order, codes absent from the "
                            "data included, so two runs share one numbering; a code of the data "
                            "outside it is a bad label. When its digit codes all have one width, "
                            "the data's shorter digit codes get their leading zeros back")
    add_table_args(group, "key")
    group.add_argument("--extra-train", dest="extra_train", nargs="+", default=[], metavar="CHECK.csv",
                       help="files predict.py --to-check wrote, filled by hand: their rows with a "
                            "code in checked_1.. are added to the training rows (never validation)")
    add_table_args(group, "extra_train")
    group.add_argument("--train-on-audit", dest="train_on_audit", action=argparse.BooleanOptionalAction,
                       default=False,
                       help="let the run use audit rows (predict.py --audit), which are for measuring: "
                            "an audit as --extra-train (its checked rows train), or audit rows with their "
                            "audit columns in --dataset, --train-data or --val-data; the next audit of this "
                            "run's predictions leaves out rows with those descriptions")
    group.add_argument("--empty-code-label", dest="empty_code_label", default=None, metavar="CODE",
                       help="rows without any code get this code (e.g. -1 for HISCO), so 'no "
                            "occupation' is learned as a class; default: such rows are an error")


def add_coding_args(group) -> None:
    """What a run keeps for choosing which predictions to use (docs/coding.md)."""
    group.add_argument("--share-calibration", dest="share_calibration", type=share_below_one, default=0.0,
                       metavar="F",
                       help="set aside a share F of the rows (of --val-data with train_mixer.py) that "
                            "choose nothing, for calibration and --target-accuracy (e.g. 0.1; default: 0)")
    group.add_argument("--report-cols", dest="report_cols", nargs="+", default=[], metavar="COL",
                       help="columns the final evaluation breaks its production curve down by "
                            "(e.g. source decade), kept in scores.parquet")


def share_below_one(text: str) -> float:
    value = _float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be 0 or more and below 1, got {text}")
    return value


def add_audit_args(parser: argparse.ArgumentParser) -> None:
    """predict.py: a random sample of the predictions to check by hand (docs/evaluation.md#audits)."""
    group = parser.add_argument_group("audit (a random sample to check by hand: docs/evaluation.md)")
    group.add_argument("--audit", nargs="+", default=None, metavar="ARG",
                       help="N AUDIT.csv: also write a seeded random sample of N predicted rows, with "
                            "empty columns correct and true_code_1.. to fill by hand, for evaluate.py "
                            "--audit (.csv, .xlsx, .parquet or .dta); AUDIT.csv alone with --audit-margin")
    group.add_argument("--audit-margin", dest="audit_margin", type=open_unit_interval, default=None,
                       metavar="M", help="instead of N: the fewest rows whose 95%% interval reaches at "
                                         "most M (e.g. 0.03) from the estimate on either side at the "
                                         "accuracy the model expects, the mean of its top code's "
                                         "probability (with --audit-by: each stratum's, for the design)")
    group.add_argument("--audit-by", dest="audit_by", default=None, metavar="COL",
                       help="a stratified sample: proportional to the rows of each value of COL "
                            "(e.g. lang, a source or decade column), each value at least 2 rows")
    group.add_argument("--audit-unit", dest="audit_unit", choices=["rows", "descriptions"], default="rows",
                       help="rows: the sampled rows, one per line; descriptions: the sampled rows "
                            "collapsed to their distinct descriptions (each with its count of rows "
                            "drawn, checked once; stopping early counts the rows drawn before the "
                            "first line left blank) (default: %(default)s)")
    group.add_argument("--audit-seed", dest="audit_seed", type=non_negative_int, default=0,
                       help="the sample's seed (default: %(default)s)")


def add_target_args(parser: argparse.ArgumentParser) -> None:
    """predict.py: which predictions to use as they are (docs/coding.md)."""
    group = parser.add_argument_group("coding at a target accuracy (docs/coding.md)")
    group.add_argument("--target-accuracy", dest="target_accuracy", type=open_unit_interval, default=None,
                       metavar="A", help="mark each row auto or check: the auto rows reach accuracy A with "
                                         "--target-confidence on new rows like the labelled ones")
    group.add_argument("--target-confidence", dest="target_confidence", type=open_unit_interval, default=0.95,
                       metavar="C", help="the probability that the promise holds (default: %(default)s)")
    group.add_argument("--calibration-data", dest="calibration_data", default=None, metavar="FILE",
                       help="labelled rows of your own to choose the threshold or temperature on (a filled "
                            "audit qualifies); default: the run's validation rows that chose nothing")
    add_table_args(group, "calibration_data")
    group.add_argument("--calibration-truth-cols", dest="calibration_truth_cols", nargs="+", default=None,
                       metavar="COL", help="the true codes of --calibration-data")
    group.add_argument("--shorter-codes", dest="shorter_codes", action=argparse.BooleanOptionalAction,
                       default=False, help="with --target-accuracy: a row whose full code misses the threshold "
                                           "gets the longest prefix class that passes it (column level)")
    group.add_argument("--code-levels", dest="code_levels", type=positive_int, nargs="+", default=None,
                       metavar="N", help="prefix lengths of the code system's coarser classes for "
                                         "--shorter-codes (default: HISCO's and ISCO's 1 2 3; none otherwise)")
    group.add_argument("--lookup", default=None, metavar="FILE",
                       help="inputs coded by hand (a filled --to-check file or audit, or a dictionary): a row "
                            "the model reads as one of them takes its codes (column source)")
    add_table_args(group, "lookup")
    group.add_argument("--lookup-input-col", dest="lookup_input_col", default=None, metavar="COL",
                       help="the description column of --lookup (default: the model's input column)")
    group.add_argument("--lookup-code-cols", dest="lookup_code_cols", nargs="+", default=None, metavar="COL",
                       help="the code columns of a --lookup dictionary")
    group.add_argument("--calibrate", action=argparse.BooleanOptionalAction, default=False,
                       help="fit each head's temperature on labelled rows that chose nothing and write "
                            "calibration.json into the model's directory; no --input needed")


# predict.py's options that act only beside another: (dest, its flag, what it needs, the dests
# that give it). Given alone they would be ignored; refuse_lone_companions says so instead.
COMPANIONS = (
    ("target_confidence", "--target-confidence", "--target-accuracy", ("target_accuracy",)),
    ("shorter_codes", "--shorter-codes", "--target-accuracy", ("target_accuracy",)),
    ("code_levels", "--code-levels", "--shorter-codes", ("shorter_codes",)),
    ("calibration_data", "--calibration-data", "--target-accuracy or --calibrate", ("target_accuracy", "calibrate")),
    ("calibration_truth_cols", "--calibration-truth-cols", "--calibration-data", ("calibration_data",)),
    ("lookup_input_col", "--lookup-input-col", "--lookup", ("lookup",)),
    ("lookup_code_cols", "--lookup-code-cols", "--lookup", ("lookup",)),
)


def refuse_lone_companions(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A companion option set (not at its default) without what it works with: one line."""
    for dest, flag, needs, given_by in COMPANIONS:
        if getattr(args, dest, None) == parser.get_default(dest):
            continue
        if not any(getattr(args, other, None) not in (None, False) for other in given_by):
            raise UserError(f"{flag} works with {needs}; pass it, or leave out {flag}")


def add_model_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("--encoder", default="minilm-l6",
                       help="encoder: a preset (minilm-l6, canine-tiny, canine-small, "
                            "canine-s-random), a Hugging Face model id or a local directory "
                            "(default: %(default)s)")
    group.add_argument("--max-len", dest="max_len", type=positive_int, default=64,
                       help="longest input in tokens; longer inputs are cut (default: %(default)s)")
    group.add_argument("--decoder-dim", dest="decoder_dim", type=positive_int, default=256,
                       help="width of the seq2seq decoder (default: %(default)s)")
    group.add_argument("--decoder-layers", dest="decoder_layers", type=positive_int, default=2,
                       help="layers of the seq2seq decoder (default: %(default)s)")
    group.add_argument("--decoder-heads", dest="decoder_heads", type=positive_int, default=4,
                       help="attention heads of the seq2seq decoder (default: %(default)s)")
    group.add_argument("--initial-checkpoint", dest="initial_checkpoint", default=None,
                       help="start from a run directory (or its last.pt / model.safetensors) "
                            "of this tool")
    group.add_argument("--only-encoder", dest="only_encoder", action=argparse.BooleanOptionalAction, default=False,
                       help="with --initial-checkpoint: load only the encoder (a different "
                            "code system gets new heads)")
    group.add_argument("--new-heads", dest="new_heads", choices=NEW_HEADS, default=None,
                       help="new heads on OccCANINE's encoder: fast (read only the input's characters) or "
                            "occcanine (read all 128 positions, for mixer.export_occcanine) (default: fast)")
    group.add_argument("--freeze-encoder", dest="freeze_encoder", action=argparse.BooleanOptionalAction, default=False,
                       help="train the heads only")


def add_training_args(parser: argparse.ArgumentParser) -> None:
    """The training flags every training entry point shares."""
    group = parser.add_argument_group("training")
    group.add_argument("--num-epochs", dest="num_epochs", type=positive_int, default=8,
                       help="passes over the training data (default: %(default)s)")
    group.add_argument("--max-steps", dest="max_steps", type=positive_int, default=None,
                       help="stop after N optimizer steps; overrides --num-epochs and sets the "
                            "learning-rate schedule length")
    group.add_argument("--stop-at-step", dest="stop_at_step", type=positive_int, default=None,
                       help="save and exit after N optimizer steps without changing the "
                            "schedule; run again on the same directory to continue")
    group.add_argument("--batch-size", dest="batch_size", type=positive_int, default=64,
                       help="rows per process per micro-step (default: %(default)s)")
    group.add_argument("--eval-batch-size", dest="eval_batch_size", type=positive_int,
                       default=None, help="rows per evaluation batch (default: 2x --batch-size)")
    group.add_argument("--learning-rate", "--lr", dest="learning_rate", type=non_negative_float,
                       default=None, help="peak learning rate of AdamW; 0 leaves the weights as "
                                          "they start (default: the recipe's: 3e-4, or 2e-5 from "
                                          "an OccCANINE model; docs/occcanine.md)")
    group.add_argument("--head-lr-scale", dest="head_lr_scale", type=positive_float, default=None,
                       help="the heads learn this many times faster than the encoder (default: "
                            "5 for new heads, 1 for heads an OccCANINE model brings trained)")
    group.add_argument("--scale-lr", dest="scale_lr", action=argparse.BooleanOptionalAction, default=False,
                       help="linear scaling rule: multiply the learning rate by "
                            "global batch / --batch-size")
    group.add_argument("--warmup-pct", dest="warmup_pct", type=unit_interval, default=None,
                       help="share of the steps spent warming up (default: 0.05; 0 from an "
                            "OccCANINE model, as its fine-tuning)")
    group.add_argument("--warmup-steps", dest="warmup_steps", type=non_negative_int, default=None,
                       help="warm-up steps (overrides --warmup-pct)")
    group.add_argument("--weight-decay", dest="weight_decay", type=_float, default=0.01,
                       help="AdamW weight decay (default: %(default)s)")
    group.add_argument("--seq2seq-weight", dest="seq2seq_weight", type=unit_interval, default=0.1,
                       help="w in loss = w * seq2seq + (1 - w) * BCE(flat) (default: %(default)s)")
    group.add_argument("--dropout", type=unit_interval, default=None,
                       help="probability of every dropout in the model, encoder included; "
                            "0 makes training deterministic (default: 0.1; from an OccCANINE "
                            "model 0.1 in the encoder and 0 in the heads, as OccCANINE trains)")
    group.add_argument("--head-dropout", dest="head_dropout", type=unit_interval, default=None,
                       help="dropout of the heads when it differs from --dropout's (default: as "
                            "--dropout; 0 from an OccCANINE model)")
    group.add_argument("--augmentation-prob", dest="augmentation_prob", type=unit_interval,
                       default=None,
                       help="share of training rows given spelling noise each time they are "
                            "drawn (default: 0.3; docs/training.md)")
    group.add_argument("--no-augmentation", dest="augmentation_prob", action="store_const",
                       const=0.0, help="no spelling noise (--augmentation-prob 0)")
    group.add_argument("--num-transformations", dest="num_transformations", type=non_negative_int,
                       default=None, help="edits of a noised row (default: 3)")
    group.add_argument("--unk-lang-prob", dest="unk_lang_prob", type=unit_interval, default=None,
                       help="share of training draws whose language becomes 'unk', so the model "
                            "also works without one (default: 0.25; no effect where every row's "
                            "language is unknown)")
    group.add_argument("--no-unk-lang", dest="unk_lang_prob", action="store_const", const=0.0,
                       help="languages kept as given (--unk-lang-prob 0)")
    group.add_argument("--eval-noise", dest="eval_noise", type=non_negative_int, default=None,
                       help="every evaluation also scores a copy of the validation rows with "
                            "this many edits each (fixed seed; 0: none; default: 2)")
    group.add_argument("--no-eval-noise", dest="eval_noise", action="store_const", const=0,
                       help="no noised validation copy (--eval-noise 0)")
    group.add_argument("--grad-accum-steps", dest="grad_accum_steps", type=positive_int, default=1,
                       help="micro-steps per optimizer step (default: %(default)s)")
    group.add_argument("--max-grad-norm", dest="max_grad_norm", type=positive_float, default=1.0,
                       help="clip the gradient norm to this (default: %(default)s)")
    group.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                       help="autocast precision (default: %(default)s)")
    group.add_argument("--use-amp", "--fp16", dest="precision", action="store_const", const="fp16",
                       help="alias of --precision fp16")
    group.add_argument("--force-precision", dest="force_precision",
                       action=argparse.BooleanOptionalAction, default=False,
                       help="run --precision bf16/fp16 even where the device would emulate it "
                            "(by default such runs use fp32 and say so)")
    group.add_argument("--seed", type=non_negative_int, default=42,
                       help="seed of the split, the data order and the weights (default: %(default)s)")
    group.add_argument("--num-workers", dest="num_workers", type=non_negative_int, default=0,
                       help="data-loader worker processes per rank (default: %(default)s)")
    group.add_argument("--length-groups", dest="length_groups", type=positive_int, default=None,
                       help="cut each training micro-batch into this many groups of rows of "
                            "similar length, each padded on its own: the same rows with less "
                            "padding (default: 2 on CPUs, 1 on GPUs, a resumed run's own; no "
                            "effect where every batch is padded to one length: OccCANINE's "
                            "decoder reads all of its 128 characters)")
    group.add_argument("--threshold", type=unit_interval, default=None,
                       help="flat head: codes with probability at least this are predicted "
                            "(default: 0.5; from an OccCANINE model its table by language, 0.31 "
                            "for other languages)")
    group.add_argument("--inherit-thresholds", dest="inherit_thresholds",
                       action=argparse.BooleanOptionalAction, default=None,
                       help="keep the per-language thresholds of the OccCANINE model the run "
                            "starts from (default: when the run keeps its code system)")
    group.add_argument("--tune-threshold", dest="tune_threshold",
                       action=argparse.BooleanOptionalAction, default=False,
                       help="at the end, choose the flat threshold with the best F1 on the "
                            "validation rows for each language with enough rows (docs/"
                            "evaluation.md) and store the table in the run: predict.py's and the "
                            "API's default")
    group.add_argument("--upsample-below", dest="upsample_below", type=non_negative_int, default=0,
                       metavar="N",
                       help="each epoch, a code (a row's first code) with fewer than N training rows "
                            "is drawn up to N rows, with replacement; drawn from --seed and the epoch "
                            "(default: 0, off)")
    group.add_argument("--downsample-top", dest="downsample_top", type=open_unit_interval, default=None,
                       metavar="F",
                       help="each epoch, a code with more than a share F of the training rows keeps "
                            "F x rows of them, drawn anew (e.g. 0.05; default: off)")
    group.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False, help="torch.compile the model")

    group = parser.add_argument_group("logging and saving")
    group.add_argument("--log-interval", dest="log_interval", type=positive_int, default=20,
                       help="steps between progress updates (default: %(default)s)")
    group.add_argument("--eval-interval", dest="eval_interval", type=positive_int, default=None,
                       help="steps between evaluations (default: once per epoch and at the end)")
    group.add_argument("--val-max-rows", dest="val_max_rows", type=non_negative_int, default=20_000,
                       help="evaluate on a fixed, seeded sample of this many validation rows "
                            "(0: all of them; default: %(default)s, see docs/evaluation.md)")
    group.add_argument("--full-val-at-end", dest="full_val_at_end",
                       action=argparse.BooleanOptionalAction, default=False,
                       help="the final evaluation uses every validation row")
    group.add_argument("--save-interval", dest="save_interval", type=positive_int, default=None,
                       help="steps between writes of last.pt (default: at every evaluation; with "
                            "--keep-best also at each new best)")
    group.add_argument("--save-each-epoch", dest="save_each_epoch", action=argparse.BooleanOptionalAction, default=False,
                       help="also keep epoch_<N>.safetensors at the end of each epoch")
    group.add_argument("--keep-best", dest="keep_best", choices=list(BEST_METRICS), default=None,
                       metavar="METRIC",
                       help="keep the model of the best evaluation by this logs.csv column (losses: "
                            "lowest; the rest: highest; ties: the earlier) as RUN/best/, which "
                            "predict.py --checkpoint RUN then uses (docs/training.md); one of "
                            + ", ".join(BEST_METRICS))
    group.add_argument("--early-stopping-patience", dest="early_stopping_patience", type=positive_int,
                       default=None, metavar="N",
                       help="with --keep-best: end the run after N evaluations in a row without an "
                            "improvement of its metric (default: off)")
    group.add_argument("--early-stopping-min-delta", dest="early_stopping_min_delta",
                       type=non_negative_float, default=0.0, metavar="D",
                       help="an improvement smaller than D does not reset the patience count (the "
                            "model is still kept as the best; default: %(default)s)")
    group.add_argument("--log-wandb", dest="log_wandb", action=argparse.BooleanOptionalAction, default=False,
                       help="log to Weights & Biases (rank 0 only)")
    group.add_argument("--log-tensorboard", dest="log_tensorboard",
                       action=argparse.BooleanOptionalAction, default=False,
                       help="write TensorBoard event files to RUN_DIR/tensorboard/ (rank 0 only; "
                            "the scalars W&B gets)")
    group.add_argument("--wandb-project-name", dest="wandb_project_name", default="mixer",
                       help="W&B project (default: %(default)s)")
    group.add_argument("--wandb-mode", dest="wandb_mode",
                       choices=["online", "offline", "disabled"], default="online",
                       help="W&B mode (default: %(default)s)")
    group.add_argument("--log-level", dest="log_level",
                       choices=["DEBUG", "INFO", "WARNING", "ERROR"], default="INFO",
                       help="verbosity of rank 0 (default: %(default)s)")
    group.add_argument("--debug", action=argparse.BooleanOptionalAction, default=False,
                       help="show Python tracebacks on errors")


def add_distributed_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("distributed (see docs/distributed.md)")
    group.add_argument("--distributed", action=argparse.BooleanOptionalAction, default=False,
                       help="train with DistributedDataParallel under torchrun / srun")
    group.add_argument("--backend", choices=["nccl", "gloo"], default=None,
                       help="process-group backend (default: nccl with CUDA, else gloo)")
    group.add_argument("--dist-timeout", dest="dist_timeout", type=positive_int, default=600,
                       help="seconds a collective may wait before every rank gives up "
                            "(default: %(default)s)")
    group.add_argument("--local-rank", "--local_rank", dest="local_rank", type=int, default=None,
                       help=argparse.SUPPRESS)
    group.add_argument("--find-unused-parameters", dest="find_unused_parameters",
                       action=argparse.BooleanOptionalAction, default=False,
                       help="DDP find_unused_parameters (switched on when parts are frozen)")
    group.add_argument("--ddp-bucket-cap-mb", dest="ddp_bucket_cap_mb", type=positive_int,
                       default=25, help="DDP gradient bucket size in MB (default: %(default)s)")
    group.add_argument("--static-graph", dest="static_graph", action=argparse.BooleanOptionalAction, default=False,
                       help="DDP static_graph (the same parameters are used every step)")
    group.add_argument("--embedding-sync", dest="embedding_sync", choices=["rows", "ddp"],
                       default="rows",
                       help="gradients of embedding tables: 'rows' all-reduces only the rows a "
                            "step touched (default; same result, far fewer bytes), 'ddp' leaves "
                            "them to DDP's dense all-reduce")


# ------------------------------------------------------------------- config
def _load_yaml_defaults(path: str) -> dict:
    import yaml

    if not os.path.isfile(path):
        raise UserError(f"--config {path}: no such file; pass a YAML file such as a run's args.yaml")
    try:
        with open(path, encoding="utf-8") as handle:
            values = yaml.safe_load(handle) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise UserError(f"--config {path}: not valid YAML ({first_line(exc)})")
    if not isinstance(values, dict):
        raise UserError(f"--config {path}: expected a mapping of flag names to values")
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict) and key in SECTIONS:
            flat.update(value)  # the nested layout of args.yaml
        else:
            flat[key.replace("-", "_")] = value
    flat.update(flat.pop("read_options", None) or {})  # args.yaml: the other files' options
    # one-shot actions and launcher facts are not configuration (args.yaml of mixer 0.1 held them)
    return {k: v for k, v in flat.items() if k not in {name for _, name in NON_PERSISTED}}


def parse_args(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]] = None):
    """Parse argv, taking defaults from --config YAML when given (flags win)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if known.config:
        defaults = _load_yaml_defaults(known.config)
        dests = {action.dest for action in parser._actions} | set(parser._defaults)
        unknown = sorted(k for k in defaults if k not in dests and k not in CONFIG_KEYS)
        if unknown:
            raise UserError(f"--config {known.config}: unknown setting(s) {', '.join(unknown)} "
                            f"for {parser.prog}")
        usable = {k: v for k, v in defaults.items() if k in dests}
        for action in parser._actions:  # the file's values get the flags' checks
            if action.dest in usable and action.dest != "help":
                try:
                    usable[action.dest] = _coerce(action, usable[action.dest])
                except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
                    raise UserError(f"--config {known.config}: {action.dest}: {exc}")
        for action in parser._actions:
            if action.required and usable.get(action.dest) not in (None, [], ""):
                action.required = False  # the file gives it
        parser.set_defaults(**usable)
    namespace = parser.parse_args(argv)
    namespace.command = [parser.prog, *argv]  # what made the run, for its model card
    return namespace


def _coerce(action: argparse.Action, value):
    if value is None and action.default is None:  # a setting left to the run (args.yaml: null)
        return None
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction,
                           argparse.BooleanOptionalAction)):
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return value
    if value is None or isinstance(action, argparse._StoreConstAction):
        return value
    if action.nargs in ("+", "*"):
        return [_coerce_one(action, v) for v in (value if isinstance(value, list) else [value])]
    return _coerce_one(action, value)


def _coerce_one(action: argparse.Action, value):
    if action.type is not None:
        value = action.type(str(value))
    elif not isinstance(value, (str, int, float)):
        raise ValueError(f"expected a single value, got {value!r}")
    else:
        value = str(value) if isinstance(value, str) else value
    if action.choices is not None and value not in action.choices:
        raise ValueError(f"{value!r} is not one of {', '.join(map(str, action.choices))}")
    return value


# Settings of the run configuration: an args.yaml of either program may hold
# some that the other program has no flag for; they are ignored, not errors.
CONFIG_KEYS = {f.name for section in SECTIONS.values() for f in dataclasses.fields(section)} | set(OWN_OPTION_DESTS)


def build_config(namespace: argparse.Namespace) -> RunConfig:
    values = vars(namespace)
    sections = {}
    for name, section_cls in SECTIONS.items():
        fields = {f.name for f in dataclasses.fields(section_cls)}
        sections[name] = section_cls(**{k: v for k, v in values.items() if k in fields})
    sections["data"].read_options = {k: values[k] for k in OWN_OPTION_DESTS if values.get(k) is not None}
    config = RunConfig(save_dir=values["save_dir"], **sections)
    validate_config(config)
    return config


def validate_config(config: RunConfig) -> None:
    data = config.data
    if data.language_col and data.language not in (None, "unk"):
        raise UserError("--language and --language-col were both given; pass one: a language "
                        "for every row, or the column that holds one per row")
    if not data.token_cache and not data.prepare_only:
        raise UserError("--no-token-cache goes with --prepare-only (prepare the data without "
                        "tokenising it); training always tokenises, for its --encoder")
    if config.train.early_stopping_patience and not config.train.keep_best:
        raise UserError("--early-stopping-patience counts evaluations without an improvement of the "
                        "--keep-best metric; pass --keep-best METRIC too, e.g. --keep-best val_loss")
    clash = [c for c in data.report_cols if c in SCORE_COLUMNS or c.startswith(("flat_", "seq2seq_"))
             or c in (data.input_col, data.language_col, *data.target_cols)]
    if clash:
        raise UserError(f"--report-cols {clash[0]}: scores.parquet has a column of that name, or it is "
                        "a column the run reads already; report a column of another name")
    if config.model.only_encoder and not config.model.initial_checkpoint:
        raise UserError("--only-encoder needs --initial-checkpoint RUN_DIR")
    if os.path.exists(config.save_dir) and not os.path.isdir(config.save_dir):
        raise UserError(f"--save-path {config.save_dir} is a file; pass a directory for the run")
    extras.check_training_config(config)  # a flag whose package is missing fails here, before any data


def run_main(main: Callable[[Optional[Sequence[str]]], int], argv=None) -> None:
    """Run an entry point: user errors become one line on stderr and exit 2."""
    debug = "--debug" in (sys.argv if argv is None else argv)
    try:
        code = main(argv)
    except UserError as exc:
        if debug:
            traceback.print_exc()
        rank = os.environ.get("RANK")
        prefix = f"[rank {rank}] " if rank not in (None, "0") else ""
        print(f"{prefix}{'' if isinstance(exc, PeerFailed) else 'error: '}{exc}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    except SystemExit:  # argparse (--help, usage errors): before any process group
        raise
    except BaseException:  # a bug: the traceback is the report
        traceback.print_exc()
        code = 1
    _exit(code or 0)


def _exit(code: int) -> None:
    """sys.exit, except after a process group (see distributed.exit_process).
    Looked up lazily so the --prepare-only path never imports torch."""
    distributed = sys.modules.get("mixer.distributed.world")
    if distributed is not None:
        distributed.exit_process(code)
    sys.exit(code)
