"""The configurations of the programs besides training (predict.py, evaluate.py,
python -m mixer.export_occcanine, python -m mixer.plot): every option's type, default
and one-line help (mixer.core.options); mixer.cli.options makes their flags from them,
and the jobs read these objects, never an argparse namespace."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from mixer.core.config import PRECISIONS, crosswalk_option, table_options
from mixer.core.options import option

AUDIT = "audit (a random sample to check by hand: docs/evaluation.md)"
TARGET = "coding at a target accuracy (docs/coding.md)"
CLASSES = "classes beside the codes (docs/classes.md)"


def hisco_column(what: str, help: str):
    """--status-col, --relation-col, --product-col: a column of the rows' HISCO status,
    relation or product codes, which pick the crosswalk's row (docs/classes.md)."""
    return option(
        None,
        flags=(f"--{what}-col",),
        metavar="COL",
        group=CLASSES,
        works_with=("crosswalk",),
        help=help,
    )


@dataclass
class PredictData:
    """The rows to code: the input file and the columns read from it."""

    input: Optional[str] = option(
        None,
        table="input",
        help="CSV, Parquet, Excel (.xlsx) or Stata (.dta) file (required unless --calibrate)",
    )
    input_col: Optional[str] = option(None, help="text column (unset: the run's)")
    language: Optional[str] = option(None, help="language of every row (unset: the run's)")
    language_col: Optional[str] = option(None, help="column with a language per row")
    status: Optional[str] = hisco_column(
        "status", "the rows' HISCO status codes, which pick the crosswalk's row for them"
    )
    relation: Optional[str] = hisco_column(
        "relation", "the rows' HISCO relation codes, as --status-col"
    )
    product: Optional[str] = hisco_column(
        "product", "the rows' HISCO product codes, as --status-col"
    )


@dataclass
class PredictModel:
    """The model and how it computes: its source and numerics."""

    checkpoint: Optional[str] = option(
        None,
        metavar="SRC",
        help="a run directory, an OccCANINE directory or checkpoint, or a hub id",
    )
    precision: str = option(
        "fp32", choices=PRECISIONS, help="autocast precision (fp32 where emulated)"
    )
    force_precision: bool = option(
        False, switch=True, help="run bf16/fp16 even where the device would emulate it"
    )
    quantize: Optional[str] = option(
        None,
        choices=("int8",),
        help="int8 linear layers on a CPU: approximate (docs/performance.md)",
    )
    tf32: Optional[bool] = option(
        None,
        switch=True,
        help="GPU matrix products in TF32 (unset: on for mixer's models; docs/performance.md)",
    )


@dataclass
class PredictOutputs:
    """The files a job writes and their layout: the predictions, the embeddings, the check
    list, the audit draw and the summary plot."""

    output: Optional[str] = option(
        None, help="file of predictions: .csv, .parquet, .xlsx or .dta (by extension)"
    )
    embeddings: Optional[str] = option(
        None,
        metavar="FILE",
        help="also (or only) write each row's pooled encoder output to FILE.npy or .parquet",
    )
    what: str = option(
        "codes",
        choices=("codes", "probs", "bin", "logits"),
        help="codes: the code table; probs, logits, bin: a matrix, a column per code (docs/predicting.md)",
    )
    columns: str = option(
        "mixer",
        choices=("mixer", "occcanine"),
        help="occcanine: OccCANINE's column names and order (docs/occcanine.md)",
    )
    system: Optional[str] = option(
        None,
        metavar="NAME",
        help="with --columns occcanine: the code system in column names, e.g. isco68",
    )
    code_descriptions: Optional[str] = option(
        None,
        metavar="FILE",
        table="code_descriptions",
        help="descriptions of the model's codes: desc_k columns (docs/data.md)",
    )
    crosswalk: Optional[list] = crosswalk_option(
        CLASSES,
        "each code's class: hisclass, hisclass_5, socpo, hiscam, or a table of code,class[,label]",
    )
    to_check: Optional[list] = option(
        None,
        nargs=2,
        metavar=("N", "CHECK.csv"),
        help="also write the N inputs most worth checking by hand (docs/coding.md)",
    )
    audit: Optional[list] = option(
        None,
        nargs="+",
        metavar="ARG",
        group=AUDIT,
        help="N AUDIT.csv: a seeded random sample of N rows to check by hand",
    )
    audit_margin: Optional[float] = option(
        None,
        type="open_unit_interval",
        metavar="M",
        group=AUDIT,
        help="instead of N: the fewest rows for a 95%% interval of +-M",
    )
    audit_by: Optional[str] = option(
        None,
        metavar="COL",
        group=AUDIT,
        help="a sample stratified by the values of COL (each at least 2 rows)",
    )
    audit_unit: str = option(
        "rows",
        choices=("rows", "descriptions"),
        group=AUDIT,
        help="rows, or the sampled rows' distinct descriptions",
    )
    audit_seed: int = option(0, type="non_negative_int", group=AUDIT, help="the sample's seed")
    summary_plot: Optional[str] = option(
        None, metavar="PNG", help="also draw the most frequent codes and the confidence histogram"
    )


@dataclass
class PredictCoding:
    """From the model's outputs to each row's codes: the heads, how many codes and at what
    probability, a lookup by hand, a target accuracy and its calibration."""

    top_k: Optional[int] = option(
        None,
        type="positive_int",
        help="codes per row at most (unset: the run's code slots; 5 for OccCANINE)",
    )
    threshold: Optional[float] = option(
        None,
        type="unit_interval",
        help="flat and full heads: the probability a code needs (unset: the model's)",
    )
    head: Optional[list] = option(
        ["flat"],
        nargs="+",
        choices=("flat", "seq2seq", "greedy", "full"),
        help="flat, seq2seq (greedy), or full; several: <head>_code_k columns (docs/predicting.md)",
    )
    alternatives: Optional[int] = option(
        None,
        type="positive_int",
        metavar="K",
        help="greedy top-k: K code sets per row from the decoder, column 'alternative'",
    )
    target_accuracy: Optional[float] = option(
        None,
        type="open_unit_interval",
        metavar="A",
        group=TARGET,
        help="mark each row auto or check: auto rows reach accuracy A",
    )
    target_confidence: float = option(
        0.95,
        type="open_unit_interval",
        metavar="C",
        group=TARGET,
        works_with=("target_accuracy",),
        help="the probability that --target-accuracy holds",
    )
    calibration_data: Optional[str] = option(
        None,
        metavar="FILE",
        group=TARGET,
        table="calibration_data",
        works_with=("target_accuracy", "calibrate"),
        help="labelled rows of your own to calibrate on (unset: the run's)",
    )
    calibration_truth_cols: Optional[list] = option(
        None,
        nargs="+",
        metavar="COL",
        group=TARGET,
        works_with=("calibration_data",),
        help="the true codes of --calibration-data",
    )
    shorter_codes: bool = option(
        False,
        switch=True,
        group=TARGET,
        works_with=("target_accuracy",),
        help="a row below the threshold gets the longest prefix that passes it",
    )
    code_levels: Optional[list] = option(
        None,
        type="positive_int",
        nargs="+",
        metavar="N",
        group=TARGET,
        works_with=("shorter_codes",),
        help="prefix lengths for --shorter-codes (unset: HISCO's and ISCO's 1 2 3)",
    )
    target_level: Optional[list] = option(
        None,
        nargs="+",
        metavar="LEVEL",
        group=TARGET,
        works_with=("target_accuracy",),
        help="levels --target-accuracy counts at: code, or a crosswalk (a mark each)",
    )
    lookup: Optional[str] = option(
        None,
        metavar="FILE",
        group=TARGET,
        table="lookup",
        help="inputs coded by hand, whose codes win over the model's (docs/coding.md)",
    )
    lookup_input_col: Optional[str] = option(
        None,
        metavar="COL",
        group=TARGET,
        works_with=("lookup",),
        help="the description column of --lookup (unset: the input's, --input-col or the model's)",
    )
    lookup_code_cols: Optional[list] = option(
        None,
        nargs="+",
        metavar="COL",
        group=TARGET,
        works_with=("lookup",),
        help="the code columns of a --lookup dictionary (unset: "
        "the model's target columns, where it has them)",
    )
    calibrate: bool = option(
        False,
        switch=True,
        group=TARGET,
        help="fit each head's temperature and write calibration.json; no --input",
    )


@dataclass
class PredictRun:
    """How the job runs: its batches and chunks, its memory, its processes; none changes the
    file."""

    batch_size: int = option(256, type="positive_int", help="rows per batch")
    chunk_size: int = option(100_000, type="positive_int", help="rows read and written at a time")
    store_memory: int = option(
        2048,
        type="positive_int",
        metavar="MB",
        help="memory for each distinct input's predictions; past it they spill to disk",
    )
    restart: bool = option(
        False,
        switch=True,
        help="start over where a killed run left parts to continue (docs/predicting.md)",
    )
    distributed: bool = option(False, switch=True, help="shard rows over torchrun ranks")
    debug: bool = option(False, switch=True, help="show Python tracebacks on errors")


@dataclass
class PredictConfig:
    """predict.py's configuration, nested by concept as RunConfig is for training: the input
    (`data`), the model, the outputs, the coding and the run. A field keeps its flag's name
    (--audit-margin: `config.outputs.audit_margin`), which is also its keyword in the Python API
    and its key in a sidecar's and a journal's `options` (options.flat_values)."""

    data: PredictData = field(default_factory=PredictData)
    model: PredictModel = field(default_factory=PredictModel)
    outputs: PredictOutputs = field(default_factory=PredictOutputs)
    coding: PredictCoding = field(default_factory=PredictCoding)
    run: PredictRun = field(default_factory=PredictRun)
    tables: dict = field(
        default_factory=dict
    )  # every role's reading options, by flag (config.option_dest)

    # the order of predict.py's flags in --help (options.options_of), as before the sections;
    # a field not named here follows these, in its section's order
    FLAG_ORDER = (
        "checkpoint",
        "input",
        "output",
        "embeddings",
        "input_col",
        "language",
        "language_col",
        "batch_size",
        "top_k",
        "threshold",
        "head",
        "what",
        "alternatives",
        "columns",
        "system",
        "code_descriptions",
        "crosswalk",
        "status",
        "relation",
        "product",
        "to_check",
        "audit",
        "audit_margin",
        "audit_by",
        "audit_unit",
        "audit_seed",
        "target_accuracy",
        "target_confidence",
        "calibration_data",
        "calibration_truth_cols",
        "shorter_codes",
        "code_levels",
        "target_level",
        "lookup",
        "lookup_input_col",
        "lookup_code_cols",
        "calibrate",
        "chunk_size",
        "store_memory",
        "restart",
        "precision",
        "force_precision",
        "quantize",
        "tf32",
        "summary_plot",
        "distributed",
        "debug",
    )

    def table_options(self, role: str):
        """How this job reads the files of a role (config.TABLE_ROLES)."""
        return table_options(self.tables, role)


@dataclass
class EvaluateConfig:
    predictions: Optional[str] = option(
        None,
        table="predictions",
        help="CSV, Parquet, Excel (.xlsx) or Stata (.dta) file of true and predicted codes",
    )
    audit: Optional[str] = option(
        None,
        metavar="AUDIT",
        table="audit",
        help="score a filled audit of predict.py --audit (docs/evaluation.md#audits)",
    )
    shares: Optional[str] = option(
        None,
        metavar="LEVEL",
        works_with=("audit",),
        help="class shares corrected by --audit: code, prefix:N or a crosswalk (docs/classes.md)",
    )
    simultaneous: bool = option(
        False,
        switch="on",
        works_with=("shares",),
        help="--shares' intervals hold for all classes at once",
    )
    shares_interval: str = option(
        "post-stratified",
        choices=(
            "post-stratified",
            "precision+leak",
            "precision+leak+audit",
            "errors+audit",
            "errors",
        ),
        works_with=("shares",),
        help="--shares' interval: the narrowest that held in the benchmark, or one proven exact",
    )
    truth_cols: Optional[list] = option(
        None, nargs="+", metavar="COL", help="columns of true codes (an audit has its own)"
    )
    pred_cols: Optional[list] = option(
        None,
        nargs="+",
        metavar="COL",
        help="columns of predicted codes (unset: predict.py's code_k columns)",
    )
    by: Optional[str] = option(None, metavar="COL", help="also per value of this column, e.g. lang")
    digits: Optional[list] = option(
        None,
        type="digit_levels",
        help="numbers of leading digits, e.g. 1-5 or 1,3,5 (unset: 1-5; an audit: whole codes)",
    )
    code_length: Optional[int] = option(
        None,
        type="positive_int",
        help="numeric codes shorter than this get leading zeros back (HISCO: 5)",
    )
    confidence_col: Optional[str] = option(
        None, metavar="COL", help="row confidence for the production curve (docs/coding.md)"
    )
    crosswalk: Optional[list] = crosswalk_option(
        CLASSES,
        "also score classes: hisclass, hisclass_5, socpo, hiscam, or a table of code,class[,label]",
    )
    status: Optional[str] = hisco_column(
        "status", "the rows' HISCO status codes, which pick the crosswalk's row for them"
    )
    relation: Optional[str] = hisco_column(
        "relation", "the rows' HISCO relation codes, as --status-col"
    )
    product: Optional[str] = hisco_column(
        "product", "the rows' HISCO product codes, as --status-col"
    )

    target_accuracy: float = option(
        0.95, type="open_unit_interval", help="the accuracy of the production curve's headline"
    )
    text_col: Optional[str] = option(
        None, metavar="COL", help="input strings, for the share of distinct strings coded"
    )
    output: Optional[str] = option(
        None, help="the table as CSV (unset: beside --predictions or --audit)"
    )
    plot: Optional[str] = option(None, help="the chart as PNG (unset: beside the CSV)")
    debug: bool = option(False, switch="on", help="show Python tracebacks on errors")
    tables: dict = field(default_factory=dict)

    def table_options(self, role: str):
        return table_options(self.tables, role)


@dataclass
class ExportConfig:
    run_dir: str = option(
        "", flags=("run_dir",), help="a run directory of the OccCANINE architecture"
    )
    out_dir: str = option("", flags=("out_dir",), help="where to write the hub layout")


@dataclass
class PlotConfig:
    run_dir: str = option("", flags=("run_dir",), help="a run directory")
    output: Optional[str] = option(None, help="PNG path (unset: RUN_DIR/training_curves.png)")
