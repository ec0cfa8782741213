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

from mixer.audit.guards import GUARDS
from mixer.cli import options
from mixer.cli import parsing as cli
from mixer.core.allocator import keep_freed_memory
from mixer.core.config import (
    PROGRAM_DIFFERENCES,
    READ_OPTIONS,
    TABLE_ROLES,
    DataConfig,
    DistConfig,
    LogConfig,
    ModelConfig,
    RunConfig,
    TargetNaming,
    TrainConfig,
    option_dest,
)
from mixer.core.programs import EvaluateConfig, PredictConfig

# the classes of the training configuration, in the order --help shows their flags
TRAINING_CLASSES = (
    DataConfig,
    TargetNaming,
    RunConfig,
    ModelConfig,
    TrainConfig,
    DistConfig,
    LogConfig,
)
TABLE_OPTION_DESTS = {option_dest(role, option) for role in TABLE_ROLES for option in READ_OPTIONS}
PREDICT_REQUIRED = {
    "checkpoint": {"predict": {"required": True}}
}  # the API's load() takes it as an argument


def program_name(script: str) -> str:
    """What usage lines call the program: the installed command's own name
    (mixer-finetune, ...) when run as one, else the script's."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name if name.startswith("mixer-") else script


def finetune_parser() -> cli.Parser:
    parser = cli.Parser(
        prog=program_name("finetune.py"),
        description=(
            "Fine-tune a classifier on one dataset with any code system: builds the label key from "
            "the data, splits train/validation, trains and writes a run directory."
        ),
        epilog="Launch: python finetune.py ... | torchrun --standalone --nproc_per_node=N "
        "finetune.py --distributed ... | torchrun --nnodes=M --node_rank=R "
        "--master_addr=HEAD --master_port=P finetune.py --distributed ...",
    )
    add_training_flags(parser, "finetune")
    return parser


def add_training_flags(parser: cli.Parser, program: str) -> None:
    """The flags of the training configuration; where the two programs differ:
    PROGRAM_DIFFERENCES (docs/programs.md)."""
    options.add_common(parser)
    options.add_flags(parser, TRAINING_CLASSES, program, PROGRAM_DIFFERENCES)


def train_mixer_parser() -> cli.Parser:
    parser = cli.Parser(
        prog=program_name("train_mixer.py"),
        description=("Train on lists of train/validation files with a built-in code system."),
        epilog="Launch: as finetune.py (python, torchrun, srun).",
    )
    add_training_flags(parser, "train_mixer")
    return parser


def _train(config) -> int:
    from mixer.distributed.launch import launched_as_one_of_several

    if config.data.prepare_only and not launched_as_one_of_several():
        # no torch on this path: preparation of millions of rows takes seconds
        from mixer.core.config import write_args
        from mixer.data.prepared.prepare import prepare_run_data
        from mixer.models.sources import resolve_start
        from mixer.data.inputs.transliterate import exactness_note

        start = resolve_start(config)
        note = exactness_note(start.recipe)  # OccCANINE's inputs without unidecode
        if note:
            print(note, file=sys.stderr)
        began = time.perf_counter()
        prepare_run_data(
            config.data,
            config.train.seed,
            config.save_dir,
            base=start.base,
            tokens=start.tokens,
            guards=GUARDS,
        )
        write_args(config, config.save_dir)
        print(
            f"data prepared in {config.save_dir} in {time.perf_counter() - began:.1f} s "
            "(--prepare-only)"
        )
        if config.data.token_cache:
            prepare_token_cache(config, start)
        return 0
    from mixer.training.run import train

    train(config)
    return 0


def prepare_token_cache(config, start) -> None:
    """--prepare-only also tokenises, so GPU jobs start training at once. Without
    torch for CANINE encoders and tokenizer.json files (mixer.models.sources.light_tokeniser)."""
    from mixer.data.prepared.files import load_prepared
    from mixer.models.sources import light_tokeniser
    from mixer.data.inputs.training_inputs import split_caches

    began = time.perf_counter()
    prepared = load_prepared(config.save_dir, with_text=False)
    split_caches(config.save_dir, light_tokeniser(start, config), prepared)
    print(
        f"token cache ready in {time.perf_counter() - began:.1f} s (--prepare-only; "
        "--no-token-cache skips it)"
    )


def finetune_main(argv: Optional[Sequence[str]] = None) -> int:
    namespace = cli.parse_args(finetune_parser(), argv)
    return _train(cli.build_config(namespace))


def train_mixer_main(argv: Optional[Sequence[str]] = None) -> int:
    namespace = cli.parse_args(train_mixer_parser(), argv)
    if not namespace.target_cols:
        namespace.target_cols = options.config_from(TargetNaming, vars(namespace)).target_cols()
    return _train(cli.build_config(namespace))


def predict_parser() -> cli.Parser:
    parser = cli.Parser(
        prog=program_name("predict.py"),
        description=(
            "Codes (or embeddings) for a CSV, Parquet, Excel or Stata file, from a run directory of "
            "this tool or an OccCANINE model."
        ),
    )
    options.add_version(parser)
    options.add_flags(parser, [PredictConfig], "predict", PREDICT_REQUIRED)
    return parser


def predict_main(argv: Optional[Sequence[str]] = None, sinks: Optional[list] = None) -> int:
    """predict.py. `sinks`: the outputs the job may write (predict_file's; None: its own)."""
    parser = predict_parser()
    job = job_config(PredictConfig, parser, parser.parse_args(argv))
    options.refuse_lone_companions(job, parser.specs)
    if job.coding.calibrate and job.coding.head == parser.get_default("head"):
        job.coding.head = None  # not given: --calibrate refuses a --head given (it fits both heads)
    from mixer.prediction.predict_job import one_language

    one_language(job)
    if job.coding.calibrate:
        from mixer.coding.calibrate import calibrate_main
        from mixer.prediction.api import Model
        from mixer.prediction.predict import Predictor
        from mixer.prediction.sinks import default_sinks, job_outputs

        outputs = tuple(job_outputs(job, default_sinks() if sinks is None else sinks))
        return calibrate_main(job, Predictor, Model, outputs)
    if not job.data.input:
        raise cli.UserError("pass --input FILE (the rows to code), or --calibrate")
    from mixer.prediction.predict_job import predict_file

    predict_file(job, sinks)
    return 0


def job_config(cls, parser, namespace):
    """A predict.py or evaluate.py configuration from its parse: the fields, and every
    file's reading options (--encoding, --lookup-sep, ...) in `tables`."""
    values = vars(namespace)
    job = options.config_from(cls, values)
    job.tables = {k: v for k, v in values.items() if k in TABLE_OPTION_DESTS}
    return job


def evaluate_parser() -> cli.Parser:
    parser = cli.Parser(
        prog=program_name("evaluate.py"),
        description=(
            "Accuracy, precision, recall and F1 at 1 to 5 leading digits, overall and per group "
            "(the OccCANINE paper's table), for the prediction columns of a file."
        ),
        epilog="Example: python evaluate.py --predictions preds.csv --truth-cols hisco_1 hisco_2 "
        "--by lang   (definitions: docs/evaluation.md)",
    )
    options.add_version(parser)
    options.add_flags(parser, [EvaluateConfig])
    return parser


def evaluate_main(argv: Optional[Sequence[str]] = None) -> int:
    parser = evaluate_parser()
    args = job_config(EvaluateConfig, parser, parser.parse_args(argv))
    from mixer.reporting import evaluation
    from mixer.core.io import write_text
    from mixer.data.tables.reading import read_table, require_columns
    from mixer.data.tables.writing import check_output_path

    if args.audit:
        other = [
            flag
            for flag, value in (
                ("--truth-cols", args.truth_cols),
                ("--pred-cols", args.pred_cols),
                ("--by", args.by),
            )
            if value
        ]
        if other:
            raise cli.UserError(
                f"--audit is scored with its own columns and strata; leave out {' '.join(other)}"
            )
        if args.shares:
            from mixer.audit.shares import evaluate_shares

            evaluate_shares(
                args.audit,
                args.predictions,
                args.table_options("audit"),
                args.table_options("predictions"),
                args.shares,
                args.simultaneous,
                args.shares_interval,
                args.code_length,
                args.output,
                args.plot,
            )
            return 0
        from mixer.audit.scores import evaluate_audit
        from mixer.prediction.classes import load

        if args.crosswalk and (args.status or args.relation or args.product):
            raise cli.UserError(
                "--audit scores the class of each code's own row of the crosswalk, as the class "
                "level's guarantee counts it; leave out --status-col, --relation-col, --product-col"
            )
        evaluate_audit(
            args.audit,
            args.predictions,
            args.table_options("audit"),
            args.table_options("predictions"),
            args.digits or [],
            args.code_length,
            args.output,
            args.plot,
            load(args.crosswalk, None, args.table_options("crosswalk")),
        )
        return 0
    if not args.predictions or not args.truth_cols:
        raise cli.UserError("pass --predictions FILE and --truth-cols COL..., or --audit AUDIT")
    args.digits = args.digits or [1, 2, 3, 4, 5]
    from mixer.data.tables.compression import inner_name

    stem = os.path.splitext(inner_name(args.predictions))[0]  # preds.csv.gz: preds
    output = args.output or f"{stem}_evaluation.csv"
    plot = args.plot or f"{os.path.splitext(output)[0]}.png"
    output = check_output_path(
        output, "--output", {"--predictions": args.predictions}, GUARDS
    )  # a link's target
    check_output_path(
        plot, "--plot", {"--predictions": args.predictions, "--output": output}, GUARDS
    )
    frame = read_table(args.predictions, args.table_options("predictions"), log=print)
    named = {
        **{c: "--truth-cols" for c in args.truth_cols},
        args.by: "--by",
        args.confidence_col: "--confidence-col",
        args.text_col: "--text-col",
    }
    require_columns(frame, [c for c in named if c], args.predictions, named)
    if args.pred_cols:
        require_columns(
            frame, args.pred_cols, args.predictions, {c: "--pred-cols" for c in args.pred_cols}
        )
        heads = {"prediction": args.pred_cols}
    else:
        heads = evaluation.prediction_groups(frame.columns, exclude=set(args.truth_cols))
        if not heads:
            raise cli.UserError(
                f"--predictions {args.predictions}: no code_k columns; name the "
                "predicted columns with --pred-cols"
            )
    truth = evaluation.codes_in_columns(frame, args.truth_cols, args.code_length)
    if not any(truth):
        raise cli.UserError(
            f"--predictions {args.predictions}: no row has a code in --truth-cols "
            f"{' '.join(args.truth_cols)}; name the columns with the true codes"
        )
    predicted = {
        head: evaluation.codes_in_columns(frame, cols, args.code_length)
        for head, cols in heads.items()
    }
    if args.code_length is None and (note := evaluation.lost_zeros_note(truth, predicted)):
        print(note, file=sys.stderr)
    table = evaluation.evaluation_table(
        truth,
        predicted,
        frame[args.by].to_numpy() if args.by else None,
        args.digits,
        group_name=args.by or "group",
    )
    if args.crosswalk:  # the same rows at each crosswalk's level (docs/classes.md)
        table = class_level(args, frame, heads, table)
    curve = production_plan(args, frame, predicted, output)  # refusals before anything is written
    write_text(output, table.to_csv(index=False))
    evaluation.plot_table(table, plot, group_name=args.by or "group")
    print(evaluation.format_table(table))
    print(f"wrote {output} and {plot}")
    if curve:
        write_production(args, frame, truth, predicted, *curve)
    return 0


def class_level(args, frame, heads: dict, table):
    """evaluate.py --crosswalk: the evaluation table with its rows at each crosswalk's level
    after the code level's, the true and the predicted codes mapped to their classes."""
    import pandas as pd

    from mixer.prediction.classes import context_values, load
    from mixer.reporting import evaluation

    context = context_values(frame, args, f"--predictions {args.predictions}")
    groups = frame[args.by].to_numpy() if args.by else None
    parts = [table]
    for walk in load(args.crosswalk, None, args.table_options("crosswalk"), args.code_length):

        def sets(columns):
            return evaluation.class_sets(frame, columns, walk, args.code_length, context)

        predicted = {head: sets(columns) for head, columns in heads.items()}
        parts.append(
            evaluation.class_table(
                sets(args.truth_cols), predicted, walk, groups, args.by or "group"
            )
        )
    return pd.concat(parts, ignore_index=True)


def production_plan(args, frame, predicted: dict, output: str):
    """(each head's confidence column, the curve's CSV and PNG beside the table), or None
    when no head has a confidence column."""
    from mixer.coding import production
    from mixer.data.tables.writing import check_output_path

    if args.confidence_col and len(predicted) > 1:
        raise cli.UserError(
            f"--confidence-col {args.confidence_col} is one head's confidence, but "
            f"{args.predictions} has {', '.join(predicted)}; name that head's columns "
            "with --pred-cols"
        )
    columns = {
        head: production.confidence_column(head, frame.columns, args.confidence_col)
        for head in predicted
    }
    columns = {head: column for head, column in columns.items() if column}
    if not columns:
        return None
    stem = (
        output[: -len("_evaluation.csv")]
        if output.endswith("_evaluation.csv")
        else os.path.splitext(output)[0]
    )
    paths = [f"{stem}_production.csv", f"{stem}_production.png"]
    for path in paths:
        check_output_path(path, "the production curve", {"--predictions": args.predictions}, GUARDS)
    return columns, paths


def write_production(args, frame, truth: list, predicted: dict, columns: dict, paths: list) -> None:
    """The production curve of every head with a confidence column (*_production.csv and
    .png beside the table), and its headline at --target-accuracy."""
    from mixer.coding import production
    from mixer.coding.curve import plot_curve
    from mixer.core.io import write_text
    from mixer.reporting import evaluation

    csv_path, png_path = paths
    groups = evaluation.group_labels(frame[args.by].to_numpy())[0] if args.by else None
    distinct = frame[args.text_col].to_numpy() if args.text_col else None
    table, missing, scored = production.production_table(
        frame,
        truth,
        {h: predicted[h] for h in columns},
        columns,
        groups,
        args.by or "group",
        distinct,
    )
    if args.crosswalk:  # each crosswalk's class level beside the codes' (docs/classes.md)
        import pandas as pd

        from mixer.prediction.classes import load

        for walk in load(args.crosswalk, None, args.table_options("crosswalk")):
            level, left, right, named = production.class_level(
                frame, truth, predicted, columns, walk, groups, args.by or "group", distinct
            )
            table = pd.concat([table, level], ignore_index=True)
            missing.update(left)
            scored.update(right)
            columns = {**columns, **named}
    for head, rows in missing.items():
        if rows:
            print(
                f"note: {rows} row(s) without a {columns[head]} are left out of the production curve"
            )
    write_text(csv_path, table.to_csv(index=False))
    plot_curve(
        table.rename(columns={args.by: "group"}) if args.by else table,
        png_path,
        args.target_accuracy,
        title=f"production curve: {os.path.basename(args.predictions)}",
    )
    from mixer.core.programs import PredictCoding

    confidence = PredictCoding.__dataclass_fields__["target_confidence"].default
    for line in production.headlines(
        table, args.target_accuracy, args.by or "group", columns, scored, confidence
    ):
        print(line)
    print(f"wrote {csv_path} and {png_path}")


def plot_main(argv: Optional[Sequence[str]] = None) -> int:
    """python -m mixer.plot RUN_DIR: the training curves of a run as a PNG."""
    from mixer.core.programs import PlotConfig
    from mixer.reporting import plot

    parser = argparse.ArgumentParser(
        prog="python -m mixer.plot", description=plot.__doc__.splitlines()[0]
    )
    options.add_flags(parser, [PlotConfig])
    job = options.config_from(PlotConfig, vars(parser.parse_args(argv)))
    try:
        print(plot.plot_training_curves(job.run_dir, job.output))
    except cli.UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


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
