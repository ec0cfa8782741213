"""The three programs: parsers and mains. Each parses flags, builds the
config and calls the package; nothing here trains or reads data itself.
Heavy imports (torch, transformers) happen inside the mains, so --help and
--prepare-only stay fast."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Optional, Sequence

from mixer import __version__
from mixer.cli import parsing as cli
from mixer.core.allocator import keep_freed_memory
from mixer.data.formatter import FORMATTERS


def program_name(script: str) -> str:
    """What usage lines call the program: the installed command's own name
    (mixer-finetune, ...) when run as one, else the script's."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name if name.startswith("mixer-") else script


def finetune_parser() -> cli.Parser:
    parser = cli.Parser(prog=program_name("finetune.py"), description=(
        "Fine-tune a classifier on one dataset with any code system: builds the label key from "
        "the data, splits train/validation, trains and writes a run directory."),
        epilog="Launch: python finetune.py ... | torchrun --standalone --nproc_per_node=N "
               "finetune.py --distributed ... | torchrun --nnodes=M --node_rank=R "
               "--master_addr=HEAD --master_port=P finetune.py --distributed ...")
    cli.add_common(parser)
    group = parser.add_argument_group("data")
    group.add_argument("--dataset", required=True,
                       help="CSV, Parquet, Excel (.xlsx) or Stata (.dta) file with text and codes")
    cli.add_table_args(group)
    cli.add_input_text_args(group)
    group.add_argument("--target-cols", dest="target_cols", nargs="+", required=True,
                       metavar="COL", help="one column per code slot, e.g. hisco_1 hisco_2 "
                                           "(an empty cell = no code)")
    cli.add_code_args(group)
    group.add_argument("--share-val", dest="share_val", type=cli.open_unit_interval, default=0.1,
                       help="share of rows held out for validation (default: %(default)s)")
    cli.add_coding_args(group)
    group.add_argument("--code-descriptions", dest="code_descriptions", default=None,
                       help="a table of code descriptions (columns code,description or the HISCO "
                            "key layout, e.g. data/hisco_key.csv); predictions then carry desc_K")
    cli.add_table_args(group, "code_descriptions")
    group.add_argument("--save-path", "--save-dir", dest="save_dir", required=True,
                       help="run directory (created; reused to resume)")
    group.add_argument("--prepare-only", dest="prepare_only", action=argparse.BooleanOptionalAction, default=False,
                       help="validate and write data_train/data_val/key.csv, tokenise them for "
                            "--encoder into the run's token cache (so GPU jobs start training at "
                            "once), then stop; each stage's time is printed")
    group.add_argument("--token-cache", dest="token_cache", action=argparse.BooleanOptionalAction,
                       default=True,
                       help="with --prepare-only: --no-token-cache prepares the data without "
                            "tokenising it (the encoder is not chosen yet; training tokenises)")
    cli.add_model_args(parser)
    cli.add_training_args(parser)
    cli.add_distributed_args(parser)
    parser.set_defaults(formatter="general")
    return parser


def train_mixer_parser() -> cli.Parser:
    parser = cli.Parser(prog=program_name("train_mixer.py"), description=(
        "Train on lists of train/validation files with a built-in code system."),
        epilog="Launch: as finetune.py (python, torchrun, srun).")
    cli.add_common(parser)
    group = parser.add_argument_group("data")
    group.add_argument("--train-data", dest="train_data", nargs="+", required=True, metavar="PATH",
                       help="training files (CSV, Parquet, .xlsx or .dta)")
    group.add_argument("--val-data", dest="val_data", nargs="+", required=True, metavar="PATH",
                       help="validation files (CSV, Parquet, .xlsx or .dta)")
    cli.add_table_args(group, "train_data")
    cli.add_table_args(group, "val_data")
    group.add_argument("--formatter", choices=list(FORMATTERS),
                       default="hisco", help="code system: hisco or occ1950 (built in), or "
                                             "general: any codes, --block-size characters (or "
                                             "parts with --use-within-block-sep), the key from "
                                             "the data or --key (default: %(default)s)")
    group.add_argument("--target-col-naming", dest="target_col_naming", default="hisco",
                       help="target columns are <naming>_1 .. <naming>_N (default: %(default)s)")
    group.add_argument("--num-target-cols", dest="num_target_cols", type=cli.positive_int,
                       default=5, help="N above: code slots per row (default: %(default)s)")
    group.add_argument("--target-cols", dest="target_cols", nargs="+", default=None, metavar="COL",
                       help="the code columns by name (instead of --target-col-naming and "
                            "--num-target-cols)")
    group.add_argument("--code-descriptions", dest="code_descriptions", default=None,
                       help="a table of code descriptions (columns code,description or the HISCO "
                            "key layout); predictions then carry desc_K")
    cli.add_table_args(group, "code_descriptions")
    cli.add_input_text_args(group)
    cli.add_code_args(group)
    cli.add_coding_args(group)
    group.add_argument("--save-dir", "--save-path", dest="save_dir", required=True,
                       help="run directory (created; reused to resume)")
    cli.add_model_args(parser)
    cli.add_training_args(parser)
    cli.add_distributed_args(parser)
    return parser


def _train(config) -> int:
    from mixer.distributed.launch import launched_as_one_of_several

    if config.data.prepare_only and not launched_as_one_of_several():
        # no torch on this path: preparation of millions of rows takes seconds
        from mixer.core.config import write_args
        from mixer.data.prepare import prepare_run_data
        from mixer.models.sources import describe_start
        from mixer.data.transliterate import exactness_note

        start = describe_start(config)
        note = exactness_note(start.recipe)  # OccCANINE's inputs without unidecode
        if note:
            print(note, file=sys.stderr)
        began = time.perf_counter()
        prepare_run_data(config.data, config.train.seed, config.save_dir, base=start.base,
                         tokens=start.tokens)
        write_args(config, config.save_dir)
        print(f"data prepared in {config.save_dir} in {time.perf_counter() - began:.1f} s "
              "(--prepare-only)")
        if config.data.token_cache:
            prepare_token_cache(config, start)
        return 0
    from mixer.training.run import train

    train(config)
    return 0


def prepare_token_cache(config, start) -> None:
    """--prepare-only also tokenises, so GPU jobs start training at once. Without
    torch for CANINE encoders and tokenizer.json files (mixer.models.sources.light_tokeniser)."""
    from mixer.data.prepare import load_prepared
    from mixer.models.sources import light_tokeniser
    from mixer.data.training_inputs import split_caches

    began = time.perf_counter()
    prepared = load_prepared(config.save_dir, with_text=False)
    split_caches(config.save_dir, light_tokeniser(start, config), prepared)
    print(f"token cache ready in {time.perf_counter() - began:.1f} s (--prepare-only; "
          "--no-token-cache skips it)")


def finetune_main(argv: Optional[Sequence[str]] = None) -> int:
    namespace = cli.parse_args(finetune_parser(), argv)
    return _train(cli.build_config(namespace))


def train_mixer_main(argv: Optional[Sequence[str]] = None) -> int:
    namespace = cli.parse_args(train_mixer_parser(), argv)
    if not namespace.target_cols:
        namespace.target_cols = [f"{namespace.target_col_naming}_{i + 1}"
                                 for i in range(namespace.num_target_cols)]
    return _train(cli.build_config(namespace))


def predict_parser() -> cli.Parser:
    parser = cli.Parser(prog=program_name("predict.py"), description=(
        "Codes (or embeddings) for a CSV, Parquet, Excel or Stata file, from a run directory of "
        "this tool or an OccCANINE model."))
    parser.add_argument("--version", action="version", version=f"mixer {__version__}")
    parser.add_argument("--checkpoint", required=True, metavar="SRC",
                        help="a run directory of finetune.py / train_mixer.py, an OccCANINE hub "
                             "directory or training checkpoint (*.bin, *.pt), or a hub id such as "
                             "Christianvedel/OccCANINE_s2s_mix")
    parser.add_argument("--input", default=None,
                        help="CSV, Parquet, Excel (.xlsx) or Stata (.dta) file (required unless --calibrate)")
    cli.add_table_args(parser, "input")
    parser.add_argument("--output", default=None,
                        help="file of predictions: .csv, .parquet, .xlsx or .dta (by extension)")
    parser.add_argument("--embeddings", default=None, metavar="FILE",
                        help="also (or only) write the pooled encoder output of every row, in "
                             "input order, to FILE.npy or FILE.parquet")
    parser.add_argument("--input-col", dest="input_col", default=None,
                        help="text column (default: the run's)")
    parser.add_argument("--language", default=None, help="language of every row (default: the run's)")
    parser.add_argument("--language-col", dest="language_col", default=None,
                        help="column with a language per row")
    parser.add_argument("--batch-size", dest="batch_size", type=cli.positive_int, default=256,
                        help="rows per batch (default: %(default)s)")
    parser.add_argument("--top-k", dest="top_k", type=cli.positive_int, default=None,
                        help="codes per row at most (default: the run's code slots; 5 for "
                             "OccCANINE's models)")
    parser.add_argument("--threshold", type=cli.unit_interval, default=None,
                        help="flat and full heads: the probability a code needs (default: the "
                             "run's; OccCANINE's per-language thresholds for its models)")
    parser.add_argument("--head", choices=["flat", "seq2seq", "greedy", "full"], nargs="+",
                        default=["flat"],
                        help="flat: the flat head; seq2seq (or greedy): the decoder, greedily; "
                             "full: every code of the key scored by the decoder (slow on CPU; "
                             "see docs/predicting.md). Several heads: columns <head>_code_k, ... "
                             "(default: flat)")
    parser.add_argument("--what", choices=["codes", "probs", "bin", "logits"], default="codes",
                        help="codes: the code table beside the input's columns (default); or a "
                             "matrix, a column per code of the key, rows in input order, to "
                             "--output .parquet, .csv or .npy: probs (flat head, or --head full), "
                             "logits (flat head), bin (1 for each code the table holds)")
    parser.add_argument("--alternatives", type=cli.positive_int, default=None, metavar="K",
                        help="greedy top-k: K different code sets from the decoder per row, each "
                             "with its confidence (OccCANINE's greedy-topk); K output rows per "
                             "input row, column 'alternative'")
    parser.add_argument("--columns", choices=["mixer", "occcanine"], default="mixer",
                        help="occcanine: OccCANINE's column names and order (its predict() table: "
                             "occ1, hisco_1, prob_1, desc_1, ...; greedy: hisco_k, desc_k, conf), "
                             "without the input's other columns (default: %(default)s)")
    parser.add_argument("--system", default=None, metavar="NAME",
                        help="with --columns occcanine: the code system in column names, e.g. "
                             "isco68_1 (default: hisco, occ1950, or code)")
    parser.add_argument("--code-descriptions", dest="code_descriptions", default=None, metavar="FILE",
                        help="descriptions of the model's codes (columns code,description or the "
                             "HISCO key layout): desc_k for a model of any code system")
    cli.add_table_args(parser, "code_descriptions")
    parser.add_argument("--to-check", dest="to_check", nargs=2, default=None, metavar=("N", "CHECK.csv"),
                        help="also write the N distinct inputs most worth checking by hand (rows "
                             "the model reads as one x (1 - confidence)) with the model's codes and "
                             "empty columns checked_1.. to fill (.csv, .parquet, .xlsx or .dta); "
                             "train on them with --extra-train")
    cli.add_audit_args(parser)
    cli.add_target_args(parser)
    parser.add_argument("--chunk-size", dest="chunk_size", type=cli.positive_int, default=100_000,
                        help="rows read and written at a time (default: %(default)s)")
    parser.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                        help="autocast precision; where the device would emulate it, fp32 runs "
                             "instead and says so (default: %(default)s)")
    parser.add_argument("--force-precision", dest="force_precision",
                        action=argparse.BooleanOptionalAction, default=False,
                        help="run --precision bf16/fp16 even where the device would emulate it")
    parser.add_argument("--quantize", choices=["int8"], default=None,
                        help="int8: on a CPU, the encoder's linear layers in int8 (PyTorch's dynamic "
                             "quantization): approximate predictions; on AVX2 CPUs slower than fp32 "
                             "(one row at a time), so measure it on yours (docs/performance.md). "
                             "Default: fp32, exact")
    parser.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=None,
                        help="on a GPU, fp32 matrix products in TF32: faster, but approximate "
                             "(probabilities move by about 1e-3, enough to reorder close codes). "
                             "Default: on for this tool's models (they train with it), off for "
                             "OccCANINE's models, whose predictions are then exact")
    parser.add_argument("--summary-plot", dest="summary_plot", default=None, metavar="PNG",
                        help="also draw the most frequent predicted codes and a histogram of "
                             "the top code's probability")
    parser.add_argument("--distributed", action=argparse.BooleanOptionalAction, default=False, help="shard rows over torchrun ranks")
    parser.add_argument("--debug", action=argparse.BooleanOptionalAction, default=False, help="show Python tracebacks on errors")
    return parser


def predict_main(argv: Optional[Sequence[str]] = None) -> int:
    parser = predict_parser()
    args = parser.parse_args(argv)
    cli.refuse_lone_companions(parser, args)
    if args.calibrate and args.head == parser.get_default("head"):
        args.head = None  # not given: --calibrate refuses a --head given (it fits both heads)
    if args.language_col and args.language:
        raise cli.UserError("--language and --language-col were both given; pass one")
    if args.calibrate:
        from mixer.prediction.calibrate import calibrate_main

        return calibrate_main(args)
    args.head = list(dict.fromkeys("seq2seq" if h == "greedy" else h for h in args.head))
    if not args.input:
        raise cli.UserError("pass --input FILE (the rows to code), or --calibrate")
    if not args.output and not args.embeddings and not args.to_check and not args.audit:
        raise cli.UserError("pass --output FILE for predictions, --embeddings FILE, --to-check N FILE, "
                            "--audit N FILE, or several")
    from mixer.prediction.predict_job import predict_file

    predict_file(args)
    return 0


def digit_levels(text: str) -> list:
    """'1-5' or '1,3,5' -> [1, 2, 3, 4, 5] / [1, 3, 5]."""
    try:
        if "-" in text:
            low, high = (int(v) for v in text.split("-", 1))
            levels = list(range(low, high + 1))
        else:
            levels = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected digits like 1-5 or 1,3,5, got {text!r}")
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"digits must be 1 or more, got {text!r}")
    return levels


def evaluate_parser() -> cli.Parser:
    parser = cli.Parser(prog=program_name("evaluate.py"), description=(
        "Accuracy, precision, recall and F1 at 1 to 5 leading digits, overall and per group "
        "(the OccCANINE paper's table), for the prediction columns of a file."),
        epilog="Example: python evaluate.py --predictions preds.csv --truth-cols hisco_1 hisco_2 "
               "--by lang   (definitions: docs/evaluation.md)")
    parser.add_argument("--version", action="version", version=f"mixer {__version__}")
    parser.add_argument("--predictions", default=None,
                        help="CSV, Parquet, Excel (.xlsx) or Stata (.dta) file with true and predicted codes "
                             "(with --audit: the predictions the audit was drawn from, to check that)")
    cli.add_table_args(parser, "predictions")
    parser.add_argument("--audit", default=None, metavar="AUDIT",
                        help="score an audit predict.py --audit wrote, filled in by hand: the accuracy of "
                             "the predictions it was drawn from with a 95%% interval, overall and by "
                             "stratum (docs/evaluation.md#audits)")
    cli.add_table_args(parser, "audit")
    parser.add_argument("--truth-cols", dest="truth_cols", nargs="+", default=None, metavar="COL",
                        help="columns of true codes (an audit has its own: true_code_1..)")
    parser.add_argument("--pred-cols", dest="pred_cols", nargs="+", default=None, metavar="COL",
                        help="columns of predicted codes (default: the code_k / <head>_code_k "
                             "columns predict.py writes, one table part per head)")
    parser.add_argument("--by", default=None, metavar="COL", help="also per value of this column, e.g. lang")
    parser.add_argument("--digits", type=digit_levels, default=None,
                        help="numbers of leading digits, e.g. 1-5 or 1,3,5 (default: 1-5; for an "
                             "audit, the whole code alone)")
    parser.add_argument("--code-length", dest="code_length", type=cli.positive_int, default=None,
                        help="numeric codes shorter than this get leading zeros back (HISCO: 5)")
    parser.add_argument("--confidence-col", dest="confidence_col", default=None, metavar="COL",
                        help="row confidence for the production curve (default: the confidence / "
                             "<head>_confidence columns predict.py writes; docs/coding.md)")
    parser.add_argument("--target-accuracy", dest="target_accuracy", type=cli.open_unit_interval,
                        default=0.95, help="the accuracy whose share coded the production curve's "
                                           "headline prints (default 0.95)")
    parser.add_argument("--text-col", dest="text_col", default=None, metavar="COL",
                        help="input strings, for the production curve's share of distinct strings coded")
    parser.add_argument("--output", default=None,
                        help="the table as CSV (default: beside --predictions, *_evaluation.csv; "
                             "beside --audit, *_scores.csv)")
    parser.add_argument("--plot", default=None, help="the chart as PNG (default: beside the CSV)")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    return parser


def evaluate_main(argv: Optional[Sequence[str]] = None) -> int:
    args = evaluate_parser().parse_args(argv)
    from mixer.reporting import evaluation
    from mixer.core.io import write_text
    from mixer.core.config import table_options
    from mixer.data.reading import read_table, require_columns
    from mixer.data.writing import check_output_path

    if args.audit:
        other = [flag for flag, value in (("--truth-cols", args.truth_cols), ("--pred-cols", args.pred_cols),
                                          ("--by", args.by)) if value]
        if other:
            raise cli.UserError(f"--audit is scored with its own columns and strata; leave out {' '.join(other)}")
        from mixer.audit.scores import evaluate_audit

        evaluate_audit(args.audit, args.predictions, table_options(vars(args), "audit"),
                       table_options(vars(args), "predictions"), args.digits or [], args.code_length,
                       args.output, args.plot)
        return 0
    if not args.predictions or not args.truth_cols:
        raise cli.UserError("pass --predictions FILE and --truth-cols COL..., or --audit AUDIT")
    args.digits = args.digits or [1, 2, 3, 4, 5]
    stem = os.path.splitext(args.predictions)[0]
    output = args.output or f"{stem}_evaluation.csv"
    plot = args.plot or f"{os.path.splitext(output)[0]}.png"
    output = check_output_path(output, "--output", {"--predictions": args.predictions})  # a link's target
    check_output_path(plot, "--plot", {"--predictions": args.predictions, "--output": output})
    frame = read_table(args.predictions, table_options(vars(args), "predictions"), log=print)
    named = {**{c: "--truth-cols" for c in args.truth_cols}, args.by: "--by",
             args.confidence_col: "--confidence-col", args.text_col: "--text-col"}
    require_columns(frame, [c for c in named if c], args.predictions, named)
    if args.pred_cols:
        require_columns(frame, args.pred_cols, args.predictions, {c: "--pred-cols" for c in args.pred_cols})
        heads = {"prediction": args.pred_cols}
    else:
        heads = evaluation.prediction_groups(frame.columns, exclude=set(args.truth_cols))
        if not heads:
            raise cli.UserError(f"--predictions {args.predictions}: no code_k columns; name the "
                                "predicted columns with --pred-cols")
    truth = evaluation.code_sets(frame, args.truth_cols, args.code_length)
    if not any(truth):
        raise cli.UserError(f"--predictions {args.predictions}: no row has a code in --truth-cols "
                            f"{' '.join(args.truth_cols)}; name the columns with the true codes")
    predicted = {head: evaluation.code_sets(frame, cols, args.code_length) for head, cols in heads.items()}
    if args.code_length is None and (note := evaluation.lost_zeros_note(truth, predicted)):
        print(note, file=sys.stderr)
    table = evaluation.evaluation_table(truth, predicted, frame[args.by].to_numpy() if args.by else None,
                                        args.digits, group_name=args.by or "group")
    curve = production_plan(args, frame, predicted, output)  # refusals before anything is written
    write_text(output, table.to_csv(index=False))
    evaluation.plot_table(table, plot, group_name=args.by or "group")
    print(evaluation.format_table(table))
    print(f"wrote {output} and {plot}")
    if curve:
        write_production(args, frame, truth, predicted, *curve)
    return 0


def production_plan(args, frame, predicted: dict, output: str):
    """(each head's confidence column, the curve's CSV and PNG beside the table), or None
    when no head has a confidence column."""
    from mixer.data.writing import check_output_path
    from mixer.reporting import production

    if args.confidence_col and len(predicted) > 1:
        raise cli.UserError(f"--confidence-col {args.confidence_col} is one head's confidence, but "
                            f"{args.predictions} has {', '.join(predicted)}; name that head's columns "
                            "with --pred-cols")
    columns = {head: production.confidence_column(head, frame.columns, args.confidence_col)
               for head in predicted}
    columns = {head: column for head, column in columns.items() if column}
    if not columns:
        return None
    stem = output[: -len("_evaluation.csv")] if output.endswith("_evaluation.csv") else os.path.splitext(output)[0]
    paths = [f"{stem}_production.csv", f"{stem}_production.png"]
    for path in paths:
        check_output_path(path, "the production curve", {"--predictions": args.predictions})
    return columns, paths


def write_production(args, frame, truth: list, predicted: dict, columns: dict, paths: list) -> None:
    """The production curve of every head with a confidence column (*_production.csv and
    .png beside the table), and its headline at --target-accuracy."""
    from mixer.coding.curve import plot_curve
    from mixer.core.io import write_text
    from mixer.reporting import evaluation, production

    csv_path, png_path = paths
    groups = evaluation.group_labels(frame[args.by].to_numpy())[0] if args.by else None
    table, missing = production.production_table(
        frame, truth, {h: predicted[h] for h in columns}, columns, groups, args.by or "group",
        frame[args.text_col].to_numpy() if args.text_col else None)
    for head, rows in missing.items():
        if rows:
            print(f"note: {rows} row(s) without a {columns[head]} are left out of the production curve")
    write_text(csv_path, table.to_csv(index=False))
    plot_curve(table.rename(columns={args.by: "group"}) if args.by else table, png_path,
               args.target_accuracy, title=f"production curve: {os.path.basename(args.predictions)}")
    for line in production.headlines(table, args.target_accuracy, args.by or "group", columns):
        print(line)
    print(f"wrote {csv_path} and {png_path}")


# the programs (the scripts and the console scripts of pyproject.toml); the ones that
# run a model keep the memory they free (mixer.core.allocator: a process-wide setting,
# so the programs' alone, not the Python API's)
def finetune_cli() -> None:
    keep_freed_memory()
    cli.run_main(finetune_main)


def train_mixer_cli() -> None:
    keep_freed_memory()
    cli.run_main(train_mixer_main)


def predict_cli() -> None:
    keep_freed_memory()
    cli.run_main(predict_main)


def evaluate_cli() -> None:
    cli.run_main(evaluate_main)
