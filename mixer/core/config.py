"""The run configuration: one typed tree of dataclasses.

The entry points build it from argparse (mixer.cli.parsing); the engine only ever sees
these objects, and the run directory stores them as args.yaml. This module
imports nothing heavy so that `--prepare-only` and `--help` stay fast.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Optional

HEADS = ("flat", "seq2seq", "full")  # what predict.py can write, each as <head>_code_k with several
NEW_HEADS = ("fast", "occcanine")  # --new-heads (ModelConfig.new_heads)

# scores.parquet's own columns (mixer.training.scores), besides <head>_... : no --report-cols name
SCORE_COLUMNS = ("row", "split", "lang", "text", "chose", "true_codes")

# Every table a program reads, by role: the flag that names the file, and the prefix of the
# flags that say how to read it (--encoding, --sep, --sheet, --header-row for the main data;
# --key-encoding ... for --key). Adding a role is one line here; its flags come from
# mixer.cli.parsing.add_table_args(group, role), its options from table_options(values, role).
TABLE_ROLES = {
    "dataset": ("--dataset", ""),  # finetune.py
    "train_data": ("--train-data", ""),  # train_mixer.py: the training files read with the main
    "val_data": ("--val-data", "val-"),  # flags, the validation files with their own (--val-encoding)
    "input": ("--input", ""),  # predict.py
    "predictions": ("--predictions", ""),  # evaluate.py
    "extra_train": ("--extra-train", "extra-train-"),
    "key": ("--key", "key-"),
    "code_descriptions": ("--code-descriptions", "code-descriptions-"),
    "audit": ("--audit", "audit-"),  # evaluate.py: an audit filled by hand (predict.py --audit writes it)
    "lookup": ("--lookup", "lookup-"),  # predict.py: inputs coded by hand, which win over the model
    "calibration_data": ("--calibration-data", "calibration-data-"),  # predict.py: labelled rows of a user's
}
READ_OPTIONS = ("encoding", "sep", "sheet", "header_row")


@dataclass(frozen=True)
class TableOptions:
    """How one file is read: CSV's encoding and separator (None: the one the file names
    or its header line uses), a workbook's sheet (None: the first) and the row that holds
    the column names (None: the first one that is not empty). `role` (a key of
    TABLE_ROLES) names the file's flag and the flags that set these, for every message."""

    encoding: str = "utf-8"
    sep: Optional[str] = None
    sheet: Optional[str] = None
    header_row: Optional[int] = None  # 1 = the file's first row (a spreadsheet's row numbers)
    role: str = "dataset"

    @property
    def what(self) -> str:
        """The flag that names the file: --dataset, --key, ..."""
        return TABLE_ROLES[self.role][0]

    def flag(self, option: str) -> str:
        """The flag that sets one option for this file: --encoding, --key-encoding, ..."""
        return "--" + TABLE_ROLES[self.role][1] + option.replace("_", "-")


def option_dest(role: str, option: str) -> str:
    """The argparse destination (and config name) of a role's option: sep, key_sep, ..."""
    return TABLE_ROLES[role][1].replace("-", "_") + option


def table_options(values, role: str) -> TableOptions:
    """A role's reading options from flat values (an argparse namespace's vars, or
    DataConfig.flat_read_options()); a value left out takes TableOptions' default."""
    given = {option: values.get(option_dest(role, option)) for option in READ_OPTIONS}
    return TableOptions(role=role, **{k: v for k, v in given.items() if v is not None})


# the options of the roles with their own flags: what DataConfig.read_options may hold
OWN_OPTION_DESTS = tuple(option_dest(role, option) for role, (_, prefix) in TABLE_ROLES.items() if prefix
                         for option in READ_OPTIONS)


# The logs.csv columns a run can keep its best model by (--keep-best), and which way is
# better: losses fall, the rest rise. The names are those the evaluation writes
# (mixer.reporting.metrics.MetricSums.result, "val_" first; "noisy_" for the noised copy).
BEST_METRICS = {**{f"val_{name}": "min" for name in ("loss", "seq2seq_loss", "flat_loss")},
                **{f"val_{name}": "max" for name in (
                    "token_accuracy", "flat_accuracy", "flat_precision", "flat_recall", "flat_f1",
                    "seq2seq_accuracy", "seq2seq_precision", "seq2seq_recall", "seq2seq_f1",
                    "noisy_flat_accuracy", "noisy_flat_f1", "noisy_seq2seq_accuracy",
                    "noisy_seq2seq_f1")}}


def epoch_number(epoch: int, rows_in_epoch: int) -> int:
    """The epoch a step trained in, counted from 1, as every line, card and record text
    says it: from the place the training state counts (epochs completed, rows of the next
    one). The step that ends an epoch belongs to it (its place is (epoch, 0))."""
    return epoch if rows_in_epoch == 0 and epoch > 0 else epoch + 1


@dataclass
class DataConfig:
    """Where the rows come from and how codes are read."""

    dataset: Optional[str] = None  # finetune.py: one file, split into train/val
    train_data: list[str] = field(default_factory=list)  # train_mixer.py
    val_data: list[str] = field(default_factory=list)
    # how the main data is read (TableOptions); the other files' options are in read_options
    encoding: str = "utf-8"  # CSV input
    sep: Optional[str] = None  # CSV input; None: the header line's
    sheet: Optional[str] = None  # Excel input; None: the first sheet
    header_row: Optional[int] = None  # CSV and Excel input; None: the first row that is not empty
    read_options: dict = field(default_factory=dict)  # e.g. {"key_encoding": "cp1252"}: as given
    input_col: str = "occ1"
    context_cols: list[str] = field(default_factory=list)
    target_cols: list[str] = field(default_factory=list)
    language: str = "unk"
    language_col: Optional[str] = None
    formatter: str = "general"  # general | hisco | occ1950
    block_size: int = 5
    use_within_block_sep: bool = False
    drop_bad_labels: bool = False
    allow_codes_shorter_than_block_size: bool = False
    zero_padded_codes: bool = False  # digit codes are --block-size digits: '1110' is '01110'
    share_val: float = 0.1
    share_calibration: float = 0.0  # rows set aside at preparation that choose nothing (docs/coding.md)
    report_cols: list[str] = field(default_factory=list)  # breakdowns kept in scores.parquet
    code_descriptions: Optional[str] = None
    key_file: Optional[str] = None  # --key: a fixed, complete list of codes (the key's order)
    empty_code_label: Optional[str] = None  # rows without a code get this code (off: an error)
    extra_train: list[str] = field(default_factory=list)  # checked files (predict.py --to-check)
    train_on_audit: bool = False  # --extra-train may hold audits (predict.py --audit)
    max_len: int = 64
    prepare_only: bool = False
    token_cache: bool = True  # --prepare-only also tokenises for the encoder

    def table_options(self, role: str) -> TableOptions:
        """How this run reads the files of a role (a key of TABLE_ROLES)."""
        return table_options(self.flat_read_options(), role)

    def flat_read_options(self) -> dict:
        main = {option: getattr(self, option) for option in READ_OPTIONS}
        return {**main, **self.read_options}


@dataclass
class ModelConfig:
    encoder: str = "minilm-l6"
    decoder_dim: int = 256
    decoder_layers: int = 2
    decoder_heads: int = 4
    dropout: Optional[float] = None  # None: the recipe's (mixer.core.recipe)
    head_dropout: Optional[float] = None  # None: as dropout (the OccCANINE recipe: 0)
    initial_checkpoint: Optional[str] = None
    only_encoder: bool = False
    # new heads on OccCANINE's encoder (--only-encoder): "fast" mask the input's padding,
    # "occcanine" read it as OccCANINE's code does (export); None: fast, or a resumed run's own
    new_heads: Optional[str] = None
    freeze_encoder: bool = False


@dataclass
class TrainConfig:
    num_epochs: int = 8
    max_steps: Optional[int] = None
    stop_at_step: Optional[int] = None
    batch_size: int = 64
    eval_batch_size: Optional[int] = None
    # None: the recipe's value for this start (mixer.core.recipe fills them before training)
    learning_rate: Optional[float] = None
    head_lr_scale: Optional[float] = None
    scale_lr: bool = False
    warmup_pct: Optional[float] = None
    warmup_steps: Optional[int] = None
    weight_decay: float = 0.01
    seq2seq_weight: float = 0.1
    grad_accum_steps: int = 1
    max_grad_norm: float = 1.0
    precision: str = "fp32"  # fp32 | bf16 | fp16 (mixer.core.precision: fp32 where emulated)
    force_precision: bool = False
    seed: int = 42
    num_workers: int = 0
    length_groups: Optional[int] = None  # groups of similar length per micro-batch; None: 2 on CPUs, 1 on GPUs
    log_interval: int = 20
    eval_interval: Optional[int] = None
    val_max_rows: int = 20_000  # 0: every validation row at every evaluation
    full_val_at_end: bool = False
    save_interval: Optional[int] = None
    save_each_epoch: bool = False
    keep_best: Optional[str] = None  # a BEST_METRICS column: RUN/best/ holds the best evaluation's model
    early_stopping_patience: Optional[int] = None  # evaluations without improvement of keep_best
    early_stopping_min_delta: float = 0.0  # an improvement smaller than this does not count
    threshold: Optional[float] = None  # None: the model's (mixer.reporting.metrics.Thresholds)
    inherit_thresholds: Optional[bool] = None  # None: yes when the start's codes are kept
    tune_threshold: bool = False
    # training noise (mixer.data.noise); None: the recipe's
    augmentation_prob: Optional[float] = None
    num_transformations: Optional[int] = None
    unk_lang_prob: Optional[float] = None
    eval_noise: Optional[int] = None  # edits of every row of the noised validation copy; 0: none
    upsample_below: int = 0  # mixer.data.resample: codes with fewer training rows are drawn up to this
    downsample_top: Optional[float] = None  # codes above this share of the rows are drawn down to it
    compile: bool = False


@dataclass
class DistConfig:
    distributed: bool = False
    backend: Optional[str] = None
    dist_timeout: int = 600  # seconds
    local_rank: Optional[int] = None  # set by the legacy torch.distributed.launch
    find_unused_parameters: bool = False
    ddp_bucket_cap_mb: int = 25
    static_graph: bool = False
    embedding_sync: str = "rows"  # rows | ddp (see mixer.distributed.gradsync)


@dataclass
class LogConfig:
    log_wandb: bool = False
    log_tensorboard: bool = False
    wandb_project_name: str = "mixer"
    wandb_mode: str = "online"
    log_level: str = "INFO"
    debug: bool = False
    command: list[str] = field(default_factory=list)  # the program and flags (the model card's)


@dataclass
class RunConfig:
    save_dir: str = "runs/default"
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
                    "data": DataConfig, "model": ModelConfig, "train": TrainConfig,
                    "dist": DistConfig, "log": LogConfig,
                }[name]
                known = {f.name for f in dataclasses.fields(section_cls)}
                kwargs[name] = section_cls(**{k: v for k, v in value.items() if k in known})
        return cls(**kwargs)


# Flags whose values never go to args.yaml: one-shot actions (prepare and stop,
# stop at a step), launcher facts (--distributed, --local-rank) and the command line. `--config
# RUN/args.yaml` then repeats the run itself, under any launcher.
NON_PERSISTED = {("dist", "local_rank"), ("dist", "distributed"), ("data", "prepare_only"),
                 ("data", "token_cache"), ("train", "stop_at_step"), ("log", "command")}


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
    write_text(os.path.join(run_dir, "args.yaml"),
               yaml.safe_dump(config_for_file(config), sort_keys=False))
