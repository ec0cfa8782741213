"""The run configuration: one typed tree of dataclasses.

The entry points build it from their flags (mixer.cli); the engine only ever sees
these objects, and the run directory stores them as args.yaml. This module
imports nothing heavy so that `--prepare-only` and `--help` stay fast.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Optional

from mixer.core.options import option


def crosswalk_option(group: str, help: str):
    """The --crosswalk field (codes to classes, docs/classes.md) of a program: its names or
    tables, read as the `crosswalk` role's files are (TABLE_ROLES)."""
    return option(
        None, nargs="+", metavar="NAME", group=group, table="crosswalk", repeat=True, help=help
    )


HEADS = ("flat", "seq2seq", "full")  # what predict.py can write, each as <head>_code_k with several
NEW_HEADS = ("fast", "occcanine")  # --new-heads (ModelConfig.new_heads)
PRECISIONS = ("fp32", "bf16", "fp16")  # mixer.core.precision

# scores.parquet's own columns (mixer.coding.scores), besides <head>_... : no --report-cols name
SCORE_COLUMNS = ("row", "split", "lang", "text", "chose", "true_codes")

# Every table a program reads, by role: the flag that names the file, and the prefix of the
# flags that say how to read it (--encoding, --sep, --sheet, --header-row for the main data;
# --key-encoding ... for --key). Adding a role is one line here; its flags come from
# the field that names the file (option(table=role); mixer.cli.options.table_specs), its
# options from table_options(values, role).
TABLE_ROLES = {
    "dataset": ("--dataset", ""),  # finetune.py
    "train_data": ("--train-data", ""),  # train_mixer.py: the training files read with the main
    "val_data": (
        "--val-data",
        "val-",
    ),  # flags, the validation files with their own (--val-encoding)
    "input": ("--input", ""),  # predict.py
    "predictions": ("--predictions", ""),  # evaluate.py
    "extra_train": ("--extra-train", "extra-train-"),
    "key": ("--key", "key-"),
    "code_descriptions": ("--code-descriptions", "code-descriptions-"),
    "audit": (
        "--audit",
        "audit-",
    ),  # evaluate.py: an audit filled by hand (predict.py --audit writes it)
    "lookup": ("--lookup", "lookup-"),  # predict.py: inputs coded by hand, which win over the model
    "calibration_data": (
        "--calibration-data",
        "calibration-data-",
    ),  # predict.py: labelled rows of a user's
    "crosswalk": ("--crosswalk", "crosswalk-"),  # predict.py, evaluate.py, the runs: code -> class
}
READ_OPTIONS = ("encoding", "sep", "sheet", "header_row", "ddi")


@dataclass(frozen=True)
class TableOptions:
    """How one file is read. CSV's encoding and separator (None: the one the file names
    or its header line uses), a workbook's sheet (None: the first) and the row that holds
    the column names (None: the first one that is not empty), an IPUMS fixed-width extract's
    DDI codebook (None: the .xml of the data file's name beside it). `role` (a key of
    TABLE_ROLES) names the file's flag and the flags that set these, for every message."""

    encoding: str = "utf-8"
    sep: Optional[str] = None
    sheet: Optional[str] = None
    header_row: Optional[int] = None  # 1 = the file's first row (a spreadsheet's row numbers)
    ddi: Optional[str] = None  # an IPUMS fixed-width extract's codebook (None: the .xml beside it)
    role: str = "dataset"
    # the Python API's keyword that passes these options (e.g. "options"): its messages name
    # TableOptions' fields under it rather than command-line flags; None: the flags
    keyword: Optional[str] = field(default=None, compare=False)

    @property
    def what(self) -> str:
        """The flag that names the file: --dataset, --key, ...; from the Python API
        (`keyword`), the keyword of its role: calibration_data=, lookup=."""
        return f"{self.role}=" if self.keyword else TABLE_ROLES[self.role][0]

    def flag(self, option: str) -> str:
        """The flag that sets one option for this file: --encoding, --key-encoding, ...; from
        the Python API (`keyword`), the keyword and field: options=TableOptions(sep=...)."""
        if self.keyword:
            return f"{self.keyword}=TableOptions({option}=...)"
        return "--" + TABLE_ROLES[self.role][1] + option.replace("_", "-")


def option_dest(role: str, option: str) -> str:
    """The flag's destination (and config name) of a role's option: sep, key_sep, ..."""
    return TABLE_ROLES[role][1].replace("-", "_") + option


def table_options(values, role: str) -> TableOptions:
    """A role's reading options from flat values (a parse's values, or
    DataConfig.flat_read_options()); a value left out takes TableOptions' default."""
    given = {option: values.get(option_dest(role, option)) for option in READ_OPTIONS}
    return TableOptions(role=role, **{k: v for k, v in given.items() if v is not None})


# the options of the roles with their own flags: what DataConfig.read_options may hold
OWN_OPTION_DESTS = tuple(
    option_dest(role, option)
    for role, (_, prefix) in TABLE_ROLES.items()
    if prefix
    for option in READ_OPTIONS
)


# The logs.csv columns a run can keep its best model by (--keep-best), and which way is
# better: losses fall, the rest rise. The names are those the evaluation writes
# (mixer.reporting.metrics.MetricSums.result, "val_" first; "noisy_" for the noised copy).
BEST_METRICS = {
    **{f"val_{name}": "min" for name in ("loss", "seq2seq_loss", "flat_loss")},
    **{
        f"val_{name}": "max"
        for name in (
            "token_accuracy",
            "flat_accuracy",
            "flat_precision",
            "flat_recall",
            "flat_f1",
            "seq2seq_accuracy",
            "seq2seq_precision",
            "seq2seq_recall",
            "seq2seq_f1",
            "noisy_flat_accuracy",
            "noisy_flat_f1",
            "noisy_seq2seq_accuracy",
            "noisy_seq2seq_f1",
        )
    },
}


def epoch_number(epoch: int, rows_in_epoch: int) -> int:
    """The epoch a step trained in, counted from 1, as every line, card and record text
    says it: from the place the training state counts (epochs completed, rows of the next
    one). The step that ends an epoch belongs to it (its place is (epoch, 0))."""
    return epoch if rows_in_epoch == 0 and epoch > 0 else epoch + 1


# The flags' groups in --help, in this order
DATA, MODEL, TRAINING, SAVING, DISTRIBUTED = (
    "data",
    "model",
    "training",
    "logging and saving",
    "distributed (see docs/distributed.md)",
)
FORMATTER_NAMES = (
    "general",
    "hisco",
    "occ1950",
)  # mixer.data.labels.formatter.FORMATTERS (a test holds them equal)


@dataclass
class DataConfig:
    """Where the rows come from and how codes are read."""

    dataset: Optional[str] = option(
        None,
        group=DATA,
        table="dataset",
        help="CSV, Parquet, Excel (.xlsx) or Stata (.dta) file with text and codes",
    )
    train_data: list[str] = option(
        [],
        nargs="+",
        metavar="PATH",
        group=DATA,
        table="train_data",
        help="training files (CSV, Parquet, .xlsx or .dta)",
    )
    val_data: list[str] = option(
        [],
        nargs="+",
        metavar="PATH",
        group=DATA,
        table="val_data",
        help="validation files (CSV, Parquet, .xlsx or .dta)",
    )
    # how the main data is read (TableOptions; flags: mixer.cli.options.add_table_args); the
    # other files' options are in read_options
    encoding: str = "utf-8"  # CSV input
    sep: Optional[str] = None  # CSV input; None: the header line's
    sheet: Optional[str] = None  # Excel input; None: the first sheet
    header_row: Optional[int] = None  # CSV and Excel input; None: the first row that is not empty
    ddi: Optional[str] = None  # IPUMS fixed-width input: its DDI codebook; None: the .xml beside it
    read_options: dict = field(default_factory=dict)  # e.g. {"key_encoding": "cp1252"}: as given
    input_col: str = option("occ1", group=DATA, help="column with the text to classify")
    context_cols: list[str] = option(
        [],
        nargs="+",
        metavar="COL",
        group=DATA,
        help="more columns the model reads after the text (docs/data.md)",
    )
    target_cols: list[str] = option(
        [],
        nargs="+",
        metavar="COL",
        group=DATA,
        help="one column per code slot, e.g. hisco_1 hisco_2 (an empty cell: no code)",
    )
    language: str = option("unk", group=DATA, help="language of every row, e.g. en (unk: unknown)")
    language_col: Optional[str] = option(
        None, group=DATA, help="column with a language per row (instead of --language)"
    )
    formatter: str = option(
        "general",
        choices=FORMATTER_NAMES,
        group=DATA,
        help="code system: hisco, occ1950 or general (any codes; docs/data.md)",
    )
    block_size: int = option(5, type="positive_int", group=DATA, help="characters per code")
    use_within_block_sep: bool = option(
        False,
        switch=True,
        group=DATA,
        help="codes are comma-separated parts (e.g. '1,12,0'), one token each",
    )
    drop_bad_labels: bool = option(
        False,
        switch=True,
        group=DATA,
        help="drop rows with invalid codes instead of stopping with an error",
    )
    allow_codes_shorter_than_block_size: bool = option(
        False,
        switch=True,
        group=DATA,
        help="accept codes shorter than --block-size as written (docs/data.md)",
    )
    zero_padded_codes: bool = option(
        False,
        switch=True,
        group=DATA,
        help="digit codes shorter than --block-size lost leading zeros: add them back",
    )
    share_val: float = option(
        0.1, type="open_unit_interval", group=DATA, help="share of rows held out for validation"
    )
    share_calibration: float = option(
        0.0,
        type="share_below_one",
        metavar="F",
        group=DATA,
        help="share of the (validation) rows kept for calibration (docs/coding.md)",
    )
    report_cols: list[str] = option(
        [],
        nargs="+",
        metavar="COL",
        group=DATA,
        help="columns the final evaluation breaks its production curve down by",
    )
    crosswalk: Optional[list] = crosswalk_option(
        DATA,
        "the run's end reports classes too: hisclass, hisclass_5, socpo, or a table of code,class",
    )
    code_descriptions: Optional[str] = option(
        None,
        group=DATA,
        table="code_descriptions",
        help="a table of code descriptions (docs/data.md); predictions then carry desc_K",
    )
    key_file: Optional[str] = option(
        None,
        flags=("--key",),
        metavar="FILE",
        group=DATA,
        table="key",
        help="a fixed, complete list of codes in order, so runs share one numbering (docs/data.md)",
    )
    empty_code_label: Optional[str] = option(
        None,
        metavar="CODE",
        group=DATA,
        help="rows without a code get this code (e.g. -1); unset: an error",
    )
    extra_train: list[str] = option(
        [],
        nargs="+",
        metavar="CHECK.csv",
        group=DATA,
        table="extra_train",
        help="predict.py --to-check files filled by hand: their checked rows train",
    )
    train_on_audit: bool = option(
        False,
        switch=True,
        group=DATA,
        help="let the run train on audit rows (predict.py --audit; docs/evaluation.md)",
    )
    max_len: int = option(
        64, type="positive_int", group=MODEL, help="longest input in tokens; longer inputs are cut"
    )
    prepare_only: bool = option(
        False,
        switch=True,
        group=DATA,
        help="validate, write and tokenise the data for --encoder, then stop (docs/training.md)",
    )
    token_cache: bool = option(
        True,
        switch=True,
        group=DATA,
        help="with --prepare-only: tokenise too (--no-token-cache: the data alone)",
    )

    def table_options(self, role: str) -> TableOptions:
        """How this run reads the files of a role (a key of TABLE_ROLES)."""
        return table_options(self.flat_read_options(), role)

    def flat_read_options(self) -> dict:
        main = {option: getattr(self, option) for option in READ_OPTIONS}
        return {**main, **self.read_options}


@dataclass
class TargetNaming:
    """train_mixer.py's other way to name the code columns: <naming>_1 .. <naming>_N.
    Not stored: the run keeps the target_cols they make."""

    target_col_naming: str = option(
        "hisco", group=DATA, help="target columns are <naming>_1 .. <naming>_N"
    )
    num_target_cols: int = option(
        5, type="positive_int", group=DATA, help="N above: code slots per row"
    )

    def target_cols(self) -> list:
        return [f"{self.target_col_naming}_{i + 1}" for i in range(self.num_target_cols)]


@dataclass
class ModelConfig:
    encoder: str = option(
        "minilm-l6",
        group=MODEL,
        help="a preset (minilm-l6, canine-tiny, canine-small, canine-s-random), a hub id or a directory",
    )
    decoder_dim: int = option(
        256, type="positive_int", group=MODEL, help="width of the seq2seq decoder"
    )
    decoder_layers: int = option(
        2, type="positive_int", group=MODEL, help="layers of the seq2seq decoder"
    )
    decoder_heads: int = option(
        4, type="positive_int", group=MODEL, help="attention heads of the seq2seq decoder"
    )
    dropout: Optional[float] = option(
        None,
        type="unit_interval",
        group=TRAINING,
        help="every dropout of the model, encoder included (0: deterministic)",
    )
    head_dropout: Optional[float] = option(
        None,
        type="unit_interval",
        group=TRAINING,
        help="dropout of the heads, when not --dropout's",
    )
    initial_checkpoint: Optional[str] = option(
        None, group=MODEL, help="start from a run directory (or its last.pt / model.safetensors)"
    )
    only_encoder: bool = option(
        False,
        switch=True,
        group=MODEL,
        help="with --initial-checkpoint: load the encoder alone (new heads)",
    )
    # new heads on OccCANINE's encoder (--only-encoder): "fast" mask the input's padding,
    # "occcanine" read it as OccCANINE's code does (export); None: fast, or a resumed run's own
    new_heads: Optional[str] = option(
        None,
        choices=NEW_HEADS,
        group=MODEL,
        help="new heads on OccCANINE's encoder: fast, or occcanine to export (docs/occcanine.md)",
    )
    freeze_encoder: bool = option(False, switch=True, group=MODEL, help="train the heads only")


@dataclass
class TrainConfig:
    num_epochs: int = option(
        8, type="positive_int", group=TRAINING, help="passes over the training data"
    )
    max_steps: Optional[int] = option(
        None,
        type="positive_int",
        group=TRAINING,
        help="stop after N optimizer steps (sets the schedule; overrides --num-epochs)",
    )
    stop_at_step: Optional[int] = option(
        None,
        type="positive_int",
        group=TRAINING,
        help="save and exit after N steps, schedule unchanged; run again to go on",
    )
    batch_size: int = option(
        64, type="positive_int", group=TRAINING, help="rows per process per micro-step"
    )
    eval_batch_size: Optional[int] = option(
        None,
        type="positive_int",
        group=TRAINING,
        help="rows per evaluation batch (unset: 2x --batch-size)",
    )
    # None: the recipe's value for this start (mixer.core.recipe fills them before training)
    learning_rate: Optional[float] = option(
        None,
        flags=("--learning-rate", "--lr"),
        type="non_negative_float",
        group=TRAINING,
        help="peak learning rate of AdamW (0: weights unchanged)",
    )
    head_lr_scale: Optional[float] = option(
        None,
        type="positive_float",
        group=TRAINING,
        help="the heads learn this many times faster than the encoder",
    )
    scale_lr: bool = option(
        False,
        switch=True,
        group=TRAINING,
        help="multiply the learning rate by global batch / --batch-size",
    )
    warmup_pct: Optional[float] = option(
        None, type="unit_interval", group=TRAINING, help="share of the steps spent warming up"
    )
    warmup_steps: Optional[int] = option(
        None, type="non_negative_int", group=TRAINING, help="warm-up steps (overrides --warmup-pct)"
    )
    weight_decay: float = option(0.01, type="_float", group=TRAINING, help="AdamW weight decay")
    seq2seq_weight: float = option(
        0.1,
        type="unit_interval",
        group=TRAINING,
        help="w in loss = w * seq2seq + (1 - w) * BCE(flat)",
    )
    grad_accum_steps: int = option(
        1, type="positive_int", group=TRAINING, help="micro-steps per optimizer step"
    )
    max_grad_norm: float = option(
        1.0, type="positive_float", group=TRAINING, help="clip the gradient norm to this"
    )
    precision: str = option(
        "fp32",
        choices=PRECISIONS,
        group=TRAINING,
        aliases=((("--use-amp", "--fp16"), "fp16", "alias of --precision fp16"),),
        help="autocast precision (docs/performance.md)",
    )
    force_precision: bool = option(
        False,
        switch=True,
        group=TRAINING,
        help="run bf16/fp16 even where the device would emulate it (else fp32)",
    )
    seed: int = option(
        42,
        type="non_negative_int",
        group=TRAINING,
        help="seed of the split, the data order and the weights",
    )
    num_workers: int = option(
        0, type="non_negative_int", group=TRAINING, help="data-loader worker processes per rank"
    )
    length_groups: Optional[int] = option(
        None,
        type="positive_int",
        group=TRAINING,
        help="groups of similar length per micro-batch (unset: 2 on CPUs, 1 on GPUs)",
    )
    log_interval: int = option(
        20, type="positive_int", group=SAVING, help="steps between progress updates"
    )
    eval_interval: Optional[int] = option(
        None,
        type="positive_int",
        group=SAVING,
        help="steps between evaluations (unset: each epoch and at the end)",
    )
    val_max_rows: int = option(
        20_000,
        type="non_negative_int",
        group=SAVING,
        help="evaluate on a seeded sample of this many validation rows (0: all)",
    )
    full_val_at_end: bool = option(
        False, switch=True, group=SAVING, help="the final evaluation uses every validation row"
    )
    save_interval: Optional[int] = option(
        None,
        type="positive_int",
        group=SAVING,
        help="steps between writes of last.pt (unset: at each evaluation)",
    )
    save_each_epoch: bool = option(
        False,
        switch=True,
        group=SAVING,
        help="also keep epoch_<N>.safetensors at the end of each epoch",
    )
    keep_best: Optional[str] = option(
        None,
        choices=tuple(BEST_METRICS),
        metavar="METRIC",
        group=SAVING,
        help="keep the best evaluation's model by this logs.csv column as RUN/best/ (docs/training.md)",
    )
    early_stopping_patience: Optional[int] = option(
        None,
        type="positive_int",
        metavar="N",
        group=SAVING,
        help="with --keep-best: stop after N evaluations without improvement",
    )
    early_stopping_min_delta: float = option(
        0.0,
        type="non_negative_float",
        metavar="D",
        group=SAVING,
        help="an improvement smaller than D does not reset the patience",
    )
    threshold: Optional[float] = option(
        None,
        type="unit_interval",
        group=TRAINING,
        help="flat head: the probability a code needs (docs/evaluation.md)",
    )
    inherit_thresholds: Optional[bool] = option(
        None,
        switch=True,
        group=TRAINING,
        help="keep the thresholds of the OccCANINE model the run starts from",
    )
    tune_threshold: bool = option(
        False,
        switch=True,
        group=TRAINING,
        help="at the end, tune the flat threshold per language on validation F1",
    )
    # training noise (mixer.data.inputs.noise); None: the recipe's
    augmentation_prob: Optional[float] = option(
        None,
        type="unit_interval",
        group=TRAINING,
        aliases=((("--no-augmentation",), 0.0, "no spelling noise (--augmentation-prob 0)"),),
        help="share of training rows given spelling noise each draw (docs/training.md)",
    )
    num_transformations: Optional[int] = option(
        None, type="non_negative_int", group=TRAINING, help="edits of a noised row"
    )
    unk_lang_prob: Optional[float] = option(
        None,
        type="unit_interval",
        group=TRAINING,
        aliases=((("--no-unk-lang",), 0.0, "languages kept as given (--unk-lang-prob 0)"),),
        help="share of training draws whose language becomes 'unk'",
    )
    eval_noise: Optional[int] = option(
        None,
        type="non_negative_int",
        group=TRAINING,
        aliases=((("--no-eval-noise",), 0, "no noised validation copy (--eval-noise 0)"),),
        help="edits of every row of a noised validation copy (0: none)",
    )
    upsample_below: int = option(
        0,
        type="non_negative_int",
        metavar="N",
        group=TRAINING,
        help="each epoch, draw codes with fewer than N training rows up to N (0: off)",
    )
    downsample_top: Optional[float] = option(
        None,
        type="open_unit_interval",
        metavar="F",
        group=TRAINING,
        help="each epoch, draw codes above a share F of the rows down to it",
    )
    compile: bool = option(False, switch=True, group=TRAINING, help="torch.compile the model")
    ngram_head: bool = option(
        True,
        switch=True,
        group=TRAINING,
        help="at the end, fit a character n-gram head the flat head's logits add (docs/training.md)",
    )


@dataclass
class DistConfig:
    distributed: bool = option(
        False,
        switch=True,
        group=DISTRIBUTED,
        help="train with DistributedDataParallel under torchrun / srun",
    )
    backend: Optional[str] = option(
        None,
        choices=("nccl", "gloo"),
        group=DISTRIBUTED,
        help="process-group backend (unset: nccl with CUDA, else gloo)",
    )
    dist_timeout: int = option(
        600,
        type="positive_int",
        group=DISTRIBUTED,
        help="seconds a collective may wait before every rank gives up",
    )
    # set by the legacy torch.distributed.launch
    local_rank: Optional[int] = option(
        None,
        flags=("--local-rank", "--local_rank"),
        type="int",
        group=DISTRIBUTED,
        hidden=True,
        help="set by torch.distributed.launch",
    )
    find_unused_parameters: bool = option(
        False,
        switch=True,
        group=DISTRIBUTED,
        help="DDP find_unused_parameters (on when parts are frozen)",
    )
    ddp_bucket_cap_mb: int = option(
        25, type="positive_int", group=DISTRIBUTED, help="DDP gradient bucket size in MB"
    )
    static_graph: bool = option(
        False,
        switch=True,
        group=DISTRIBUTED,
        help="DDP static_graph (the same parameters are used every step)",
    )
    embedding_sync: str = option(
        "rows",
        choices=("rows", "ddp"),
        group=DISTRIBUTED,
        help="embedding gradients: rows (only the rows touched) or ddp (dense; docs/distributed.md)",
    )


@dataclass
class LogConfig:
    log_wandb: bool = option(
        False, switch=True, group=SAVING, help="log to Weights & Biases (rank 0 only)"
    )
    log_tensorboard: bool = option(
        False,
        switch=True,
        group=SAVING,
        help="write TensorBoard event files to RUN_DIR/tensorboard/ (rank 0 only)",
    )
    wandb_project_name: str = option("mixer", group=SAVING, help="W&B project")
    wandb_mode: str = option(
        "online", choices=("online", "offline", "disabled"), group=SAVING, help="W&B mode"
    )
    log_level: str = option(
        "INFO",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        group=SAVING,
        help="verbosity of rank 0",
    )
    debug: bool = option(False, switch=True, group=SAVING, help="show Python tracebacks on errors")
    command: list[str] = field(default_factory=list)  # the program and flags (the model card's)


@dataclass
class RunConfig:
    save_dir: str = option(
        "runs/default", group=DATA, help="run directory (created; reused to resume)"
    )
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    log: LogConfig = field(default_factory=LogConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "RunConfig":
        sections = {f.name: f.type for f in dataclasses.fields(cls)}
        kwargs = {}
        for name, value in values.items():
            if name == "save_dir":
                kwargs[name] = value
            elif name in sections and isinstance(value, dict):
                section_cls = {
                    "data": DataConfig,
                    "model": ModelConfig,
                    "train": TrainConfig,
                    "dist": DistConfig,
                    "log": LogConfig,
                }[name]
                known = {f.name for f in dataclasses.fields(section_cls)}
                kwargs[name] = section_cls(**{k: v for k, v in value.items() if k in known})
        return cls(**kwargs)


# Where finetune.py and train_mixer.py differ (docs/programs.md#finetunepy-and-train_mixerpy):
# field -> {program: what differs}. A field named here has a flag only in the programs it
# names (None: no flag, but --config may set it); every other field of the training
# configuration is the same flag, default and help in both.
TRAINING_PROGRAMS = ("finetune", "train_mixer")
PROGRAM_DIFFERENCES = {
    "dataset": {"finetune": {"required": True}},  # one file, split by --share-val
    "share_val": {"finetune": {}},
    "prepare_only": {"finetune": {}},
    "token_cache": {"finetune": {}},
    "train_data": {"train_mixer": {"required": True}},  # the split comes as files
    "val_data": {"train_mixer": {"required": True}},
    "formatter": {"finetune": None, "train_mixer": {"default": "hisco"}},  # finetune.py: general
    "target_col_naming": {"train_mixer": {}},
    "num_target_cols": {"train_mixer": {}},
    "target_cols": {
        "finetune": {"required": True},  # train_mixer.py: unset, from the two above
        "train_mixer": {
            "default": None,
            "help": "the code columns by name (instead of --target-col-naming, --num-target-cols)",
        },
    },
    "save_dir": {
        "finetune": {"flags": ("--save-path", "--save-dir"), "required": True},
        "train_mixer": {"flags": ("--save-dir", "--save-path"), "required": True},
    },
}


# Flags whose values never go to args.yaml: one-shot actions (prepare and stop,
# stop at a step), launcher facts (--distributed, --local-rank) and the command line. `--config
# RUN/args.yaml` then repeats the run itself, under any launcher.
NON_PERSISTED = {
    ("dist", "local_rank"),
    ("dist", "distributed"),
    ("data", "prepare_only"),
    ("data", "token_cache"),
    ("train", "stop_at_step"),
    ("log", "command"),
}


def config_for_file(config: RunConfig) -> dict:
    """The configuration as args.yaml holds it (launcher details left out)."""
    values = config.to_dict()
    for section, name in NON_PERSISTED:
        values[section].pop(name, None)
    return values


def write_args(config: RunConfig, run_dir: str) -> None:
    import yaml

    from mixer.core.io import write_text

    os.makedirs(run_dir, exist_ok=True)
    write_text(
        os.path.join(run_dir, "args.yaml"), yaml.safe_dump(config_for_file(config), sort_keys=False)
    )
