"""Assemble a training run from a RunConfig: the one function both training
entry points call. Order matters for DDP: data is prepared by rank 0 first,
parts are frozen before wrapping, and the process group is always torn down."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Optional

import numpy as np
import torch

from mixer.version import __version__
from mixer.distributed import runlock
from mixer.distributed import world as mdist
from mixer.models.checkpoint import Checkpointer, load_file
from mixer.core import allocator
from mixer.core.config import RunConfig, TrainConfig, config_for_file, epoch_number, write_args
from mixer.data.labels.key import labels_of
from mixer.data.prepared.files import load_prepared, prepared_stamp
from mixer.audit.guards import GUARDS
from mixer.data.prepared.prepare import prepare_run_data
from mixer.data.inputs.padding import InputPadding
from mixer.data.inputs.dataset import (
    Collator,
    RowDataset,
    StepSampler,
    eval_batches,
    ignore_stop_signals,
    shard_indices,
    stop_workers,
)
from mixer.models import keyed_dropout
from mixer.models.encoders import save_encoder_files, token_ids_of
from mixer.reporting import card
from mixer.reporting.metrics import Thresholds
from mixer.data.inputs.noise import NoiseConfig
from mixer.core.recipe import RESUMED, previous_settings
from mixer.core.recipe import resolve as resolve_recipe
from mixer.data.inputs.training_inputs import (
    RowInputs,
    language_codes,
    split_caches,
    text_store,
    prepared_data_id,
)
from mixer.models import sources
from mixer.models.sources import light_tokeniser, resolve_new_heads, resolve_start
from mixer.core.errors import UserError
from mixer.core.io import disk_full
from mixer.distributed.gradsync import no_grad_sync, take_out_of_ddp
from mixer.models.model import MODEL_FILE, MixerModel
from mixer.reporting.tracking import NullTracker, Tracker, configure_logging, logger
from mixer.core.precision import pad_multiple
from mixer.core.precision import resolve as resolve_precision
from mixer.training.schedule import Layout, Schedule
from mixer.training.best import keeper as best
from mixer.training.best.hook import KeepBest
from mixer.training.hooks import Cards, Curves, NgramHead, Scores, TuneThresholds, registered
from mixer.training.parts import TrainParts
from mixer.training.resume import seed_everything
from mixer.training.trainer import Trainer
from mixer.training.validation import validation_sample
from mixer.data.inputs.transliterate import exactness_note


def train(config: RunConfig) -> dict:
    """Prepare (rank 0), build, train and save one run. Returns the last metrics."""
    world = mdist.setup(config.dist, log=print)
    try:
        configure_logging(config.log.log_level, world.is_main)
        return _train(config, world)
    except Exception as exc:  # noqa: BLE001 - a full disk is the user's to fix, not a bug
        reason = None if isinstance(exc, UserError) else disk_full(exc)
        if reason is None:
            raise
        raise UserError(
            f"{config.save_dir}: the disk is full ({reason}) while writing the run; every file "
            "is written whole or not at all, so last.pt, best/ and the model are as they were: "
            "free space (or move the run) and run the same command again to continue"
        ) from exc
    finally:
        mdist.teardown(world)


def _train(config: RunConfig, world: mdist.World) -> dict:
    run_dir = config.save_dir
    start = resolve_start(config)  # a fresh encoder, an earlier run or an OccCANINE model
    # the flags left out, filled for this start (or as the run being resumed had them)
    resumed = previous_settings(run_dir)
    config, recipe = resolve_recipe(config, start, resumed)
    config = resolve_new_heads(
        config, start, resumed
    )  # their form: the flag's, the run's own, or fast
    config = dataclasses.replace(
        config,
        train=dataclasses.replace(
            config.train, length_groups=length_groups(config, world.device, resumed)
        ),
    )  # args.yaml keeps it
    best.check_metric(config.train)  # before anything is written
    crosswalks(config)  # the names and tables checked, before anything is written
    thresholds, thresholds_from = starting_thresholds(config, start)

    def check_resume(prepared):  # on the prepared rows, before anything is written
        sample = validation_sample(len(prepared.val), config.train.val_max_rows, config.train.seed)
        best.check_resume(
            run_dir,
            config.train.keep_best,
            best.conditions(config.train, sample, thresholds),
            resuming=resumed is not None,
        )

    note = exactness_note(start.recipe)  # OccCANINE's inputs without unidecode
    if note:
        logger.warning(note)
    # one run at a time in a directory: rank 0 takes RUN/.lock before anything is written
    lock = mdist.main_only(lambda: runlock.acquire(run_dir, log=logger.warning), world)  # all ranks
    try:
        return _train_locked(
            config, world, start, recipe, (thresholds, thresholds_from), check_resume
        )
    finally:
        if lock is not None:
            lock.release()


def _train_locked(
    config: RunConfig, world: mdist.World, start, recipe, starting: tuple, check_resume
) -> dict:
    """_train's work once the run directory is this run's: the builders below, then the loop."""
    run_dir = config.save_dir
    thresholds, thresholds_from = starting
    prepared = prepare_data(config, world, start, check_resume)
    if config.data.prepare_only:
        return {}
    precision = set_up_device(config, world)
    # from here the training settings as this device runs them: args.yaml keeps --precision as asked
    train_config = dataclasses.replace(config.train, precision=precision)
    key_codes = list(prepared.key["code"])
    model, encoder, token_ids = build_model(config, world, start, prepared.formatter, key_codes)
    collate = build_collator(config, world, start, prepared.formatter, key_codes, encoder, model)
    noise = NoiseConfig(
        train_config.augmentation_prob, train_config.num_transformations, train_config.unk_lang_prob
    )
    loaders = build_loaders(
        config, train_config, world, prepared, key_codes, token_ids, collate, noise
    )
    model, grad_sync = place_model(model, config, world)
    schedule, optimizer, scheduler, learning_rate = build_optimization(
        model, train_config, world, loaders.sampler
    )
    parts = TrainParts(
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        grad_sync=grad_sync,
        schedule=schedule,
        thresholds=thresholds,
        **loaders.parts(),
        **run_facts(
            config,
            train_config,
            world,
            start,
            recipe,
            prepared,
            key_codes,
            encoder,
            schedule,
            loaders,
            thresholds,
            thresholds_from,
        ),
    )
    trainer = build_trainer(config, train_config, world, parts, key_codes, encoder)
    report_setup(
        world,
        train_config,
        loaders.sampler,
        trainer.total_steps,
        learning_rate,
        loaders.train_rows,
        loaders.val_rows,
        len(key_codes),
        encoder.source,
        model,
        [
            recipe.describe(),
            describe_noise(noise, prepared.train["lang"], train_config.eval_noise),
            describe_groups(collate.groups, collate.padding),
            f"flat threshold {thresholds.describe()}",
        ]
        + ([allocator.kept()] if allocator.kept() else []),
    )
    try:
        metrics = trainer.fit()
    finally:
        trainer.close()  # what its hooks started (the n-gram head's fit beside the training)
        stop_workers(*loaders.all())
    if world.is_main and trainer.completed:
        report_end(metrics, run_dir, kept_best(trainer.hooks))
    return metrics


# ------------------------------------------------------------------ the builders, in _train_locked's order
def prepare_data(config: RunConfig, world: mdist.World, start, check_resume):
    """Rank 0 prepares (the others wait without a time limit), then every rank reads the
    labels; --prepare-only makes the token cache too: tokenise on a CPU node, train elsewhere."""
    run_dir = config.save_dir
    began = time.perf_counter()
    mdist.main_first(
        lambda: prepare_run_data(
            config.data,
            config.train.seed,
            run_dir,
            log=logger.info,
            check=check_resume,
            base=start.base,
            tokens=start.tokens,
            guards=GUARDS,  # an audit's rows train only when asked
        ),
        world,
        others=lambda: None,
    )
    prepared = load_prepared(run_dir, with_text=False)
    if world.is_main:
        write_args(config, run_dir)
    if config.data.prepare_only:
        logger.info(
            f"data prepared in {run_dir} in {time.perf_counter() - began:.1f} s (--prepare-only)"
        )
        if config.data.token_cache:
            began = time.perf_counter()
            split_caches(run_dir, light_tokeniser(start, config), prepared, world, log=logger.info)
            logger.info(
                f"token cache ready in {time.perf_counter() - began:.1f} s (--prepare-only; "
                "--no-token-cache skips it)"
            )
    return prepared


def set_up_device(config: RunConfig, world: mdist.World) -> str:
    """Seeds, TF32, and the precision the device computes in (mixer.core.precision;
    args.yaml keeps the request)."""
    seed_everything(config.train.seed)
    if world.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = (
            True  # TF32 matmuls on Ampere+: ~fp32 accuracy, much faster
        )
        torch.backends.cudnn.allow_tf32 = True
    return resolve_precision(
        config.train.precision, world.device, config.train.force_precision, logger.info
    )


def build_model(config: RunConfig, world: mdist.World, start, formatter, key_codes: list) -> tuple:
    """The model and its encoder, from the start (mixer.models.sources), and the
    encoder's token ids. Its dropouts are keyed by the row (mixer.models.keyed_dropout):
    the masks do not come from the ranks' streams, which differ from here."""
    model, encoder = sources.build_model(start, config, formatter, key_codes, log=logger.info)
    check_max_len(start.recipe.max_len, encoder.model.config)
    keyed_dropout.install(model)
    torch.manual_seed(
        config.train.seed + world.rank
    )  # weights are equal (DDP broadcasts); streams differ
    return model, encoder, token_ids_of(encoder, start.recipe)


def build_collator(
    config: RunConfig, world: mdist.World, start, formatter, key_codes: list, encoder, model
) -> Collator:
    return Collator(
        encoder.tokenizer.pad_token_id or 0,
        formatter.encode_blocks(key_codes),
        bos=formatter.bos_id,
        eos=formatter.eos_id,
        code_pad=formatter.pad_id,
        padding=InputPadding.for_encoder(
            encoder.model.config,
            start.recipe.max_len,
            model.padding_reads(decoder=True),
            pad_multiple(world.device),
        ),
        groups=config.train.length_groups,
    )


@dataclasses.dataclass
class Loaders:
    """The run's data loaders, and the rows behind them."""

    sampler: StepSampler
    train: torch.utils.data.DataLoader
    val: torch.utils.data.DataLoader  # the validation sample (--val-max-rows)
    sample: np.ndarray  # its rows
    train_rows: int
    val_rows: int
    val_langs: np.ndarray
    full_val: Optional[torch.utils.data.DataLoader] = None
    noisy_val: Optional[torch.utils.data.DataLoader] = None
    noisy_full_val: Optional[torch.utils.data.DataLoader] = None
    cal: Optional[torch.utils.data.DataLoader] = None
    cal_langs: Optional[np.ndarray] = None

    def all(self) -> tuple:
        return self.train, self.val, self.full_val, self.noisy_val, self.noisy_full_val, self.cal

    def parts(self) -> dict:
        """TrainParts' fields of the loaders."""
        return dict(
            train_loader=self.train,
            sampler=self.sampler,
            val_loader=self.val,
            full_val_loader=self.full_val,
            val_rows=(len(self.sample), self.val_rows),
            val_langs=self.val_langs,
            noisy_val_loader=self.noisy_val,
            noisy_full_val_loader=self.noisy_full_val,
            cal_loader=self.cal,
            cal_langs=self.cal_langs,
        )


def build_loaders(
    config: RunConfig,
    train_config: TrainConfig,
    world: mdist.World,
    prepared,
    key_codes: list,
    token_ids,
    collate: Collator,
    noise: NoiseConfig,
) -> Loaders:
    """The training loader (its own sampler) and the evaluation loaders: the validation
    sample, every validation row (--full-val-at-end), their noised copies (--eval-noise)
    and the calibration rows (--share-calibration), each row on one rank."""
    run_dir = config.save_dir
    num_blocks = prepared.formatter.max_num_codes
    caches = split_caches(run_dir, token_ids, prepared, world, log=logger.info)

    def inputs_of(split, frame, noise_config, every_row=False):
        """Token ids of a split's drawn rows: the cache's, or noised and tokenised now."""
        if not noise_config.active:
            return RowInputs(caches[split])

        def store(name):
            return text_store(
                run_dir,
                name,
                prepared_data_id(run_dir, name),
                world,
                log=logger.info,
                has_context=bool(config.data.context_cols),
            )

        codes, names = language_codes(frame["lang"])
        return RowInputs(
            caches[split],
            token_ids,
            store(split),
            codes,
            names,
            noise_config,
            train_config.seed,
            every_row=every_row,
            words=store("train"),
        )

    train_labels = labels_of(prepared.train, key_codes, num_blocks)
    val_labels = labels_of(prepared.val, key_codes, num_blocks)
    train_set = RowDataset(inputs_of("train", prepared.train, noise), train_labels)
    val_set = RowDataset(inputs_of("val", prepared.val, NoiseConfig(0.0, 0, 0.0)), val_labels)
    eval_noise = NoiseConfig(1.0, train_config.eval_noise, 0.0)
    noisy_val_set = (
        RowDataset(inputs_of("val", prepared.val, eval_noise, every_row=True), val_labels)
        if train_config.eval_noise
        else None
    )
    cal_set = (
        RowDataset(
            inputs_of("cal", prepared.cal, NoiseConfig(0.0, 0, 0.0)),
            labels_of(prepared.cal, key_codes, num_blocks),
        )
        if prepared.cal is not None
        else None
    )

    sampler = StepSampler(
        len(train_set),
        train_config.batch_size,
        world.world_size,
        world.rank,
        train_config.grad_accum_steps,
        train_config.seed,
        resampled_rows(train_labels[:, 0], train_config),
    )
    pin = world.device.startswith("cuda")
    workers = dict(
        num_workers=train_config.num_workers,
        persistent_workers=train_config.num_workers > 0,
        pin_memory=pin,
        collate_fn=collate,
        worker_init_fn=ignore_stop_signals if train_config.num_workers else None,
    )
    # its own generator: making an iterator must not draw from the global RNG (exact resume)
    train_loader = torch.utils.data.DataLoader(
        train_set,
        batch_sampler=sampler,
        generator=torch.Generator().manual_seed(train_config.seed),
        **dict(workers, collate_fn=collate.grouped),
    )
    eval_size = train_config.eval_batch_size or 2 * train_config.batch_size
    sample = validation_sample(len(val_set), train_config.val_max_rows, train_config.seed)

    def val_loader_of(rows, dataset=val_set):  # this rank's share of `rows`: each row on one rank
        mine = rows[shard_indices(len(rows), world.world_size, world.rank)]
        return torch.utils.data.DataLoader(
            dataset, batch_sampler=eval_batches(mine, eval_size, dataset.lengths()), **workers
        )

    full_val_loader = (
        val_loader_of(np.arange(len(val_set)))
        if train_config.full_val_at_end and len(sample) < len(val_set)
        else None
    )
    return Loaders(
        sampler=sampler,
        train=train_loader,
        val=val_loader_of(sample),
        sample=sample,
        train_rows=len(train_set),
        val_rows=len(val_set),
        val_langs=prepared.val["lang"].astype(str).to_numpy(),
        full_val=full_val_loader,
        noisy_val=val_loader_of(sample, noisy_val_set) if noisy_val_set is not None else None,
        noisy_full_val=(
            val_loader_of(np.arange(len(val_set)), noisy_val_set)
            if noisy_val_set is not None and full_val_loader is not None
            else None
        ),
        cal=val_loader_of(np.arange(len(cal_set)), cal_set)
        if cal_set is not None and len(cal_set)
        else None,
        cal_langs=None if prepared.cal is None else prepared.cal["lang"].astype(str).to_numpy(),
    )


def build_optimization(
    model, train_config: TrainConfig, world: mdist.World, sampler: StepSampler
) -> tuple:
    """The schedule (counted in rows), AdamW and its learning-rate scheduler, and the
    peak learning rate (--scale-lr)."""
    layout = Layout(world.world_size, train_config.batch_size, train_config.grad_accum_steps)
    schedule = Schedule(
        sampler.rows_per_epoch,
        layout,
        train_config.num_epochs,
        train_config.max_steps,
        train_config.warmup_steps,
        train_config.warmup_pct,
    )
    scale = sampler.global_batch_size / train_config.batch_size if train_config.scale_lr else 1
    learning_rate = train_config.learning_rate * scale
    optimizer = build_optimizer(
        model, learning_rate, train_config.head_lr_scale, train_config.weight_decay
    )
    # a plain function (LambdaLR saves the state of callable objects): reads the schedule as resumed
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: schedule.factor(step))
    return schedule, optimizer, scheduler, learning_rate


def run_facts(
    config: RunConfig,
    train_config: TrainConfig,
    world: mdist.World,
    start,
    recipe,
    prepared,
    key_codes: list,
    encoder,
    schedule: Schedule,
    loaders: Loaders,
    thresholds: Thresholds,
    thresholds_from: str,
) -> dict:
    """TrainParts' fields of what the run stores and says of itself: config.json's
    content, the model card's facts, what evaluations are measured with, the end-of-run
    step on the scored rows."""
    run_dir, formatter, sample = config.save_dir, prepared.formatter, loaders.sample
    walks = crosswalks(config, formatter)
    return dict(
        key_blocks=torch.from_numpy(formatter.encode_blocks(key_codes)),
        num_blocks=formatter.max_num_codes,
        block_size=formatter.block_size,
        formatter=formatter,
        model_extra=dict(
            model_extra(config, formatter, encoder.source, start, thresholds),
            thresholds_from=thresholds_from,
        ),
        coding=coding_step(
            run_dir,
            config,
            formatter,
            sample,
            loaders.val_rows,
            loaders.full_val is not None,
            walks,
        ),
        crosswalks=walks,
        eval_conditions=best.conditions(train_config, sample, thresholds),
        card_facts=card.run_facts(
            dataclasses.replace(config, train=train_config),
            prepared_stamp(run_dir),
            formatter,
            len(key_codes),
            language_rows(prepared.train["lang"]),
            start,
            recipe.describe().replace(RESUMED, ""),  # the card shows each job's settings
            schedule.layout.describe(),
            len(sample),
            encoder.source,
            card.describe_launch(
                world.launcher, world.world_size, world.num_nodes, world.local_world_size
            ),
        ),
    )


def build_hooks(train_config: TrainConfig) -> list:
    """What the run does at evaluations and at its end (mixer.training.hooks), in the
    order the Trainer calls them: the curves right after the last model, the best
    before the n-gram head, which comes before the thresholds, the cards last; then those registered with
    mixer.training.hooks.register."""
    keep = KeepBest()
    hooks = (
        [Curves(), keep, NgramHead()]
        + ([TuneThresholds()] if train_config.tune_threshold else [])
        + [Scores(), Cards(best=lambda: keep.best)]
    )  # the cards describe the best the keeper holds
    return hooks + registered(train_config)


def kept_best(hooks: list):
    """The run's best record, as its KeepBest hook holds it (None: none)."""
    return next((hook.best for hook in hooks if isinstance(hook, KeepBest)), None)


def build_trainer(
    config: RunConfig,
    train_config: TrainConfig,
    world: mdist.World,
    parts: TrainParts,
    key_codes: list,
    encoder,
) -> Trainer:
    """The Trainer with its hooks, resumed from the run's latest loadable checkpoint (or
    a fresh start, which removes an earlier run's best), and its tracker (rank 0)."""
    run_dir = config.save_dir
    checkpointer = Checkpointer(run_dir, log=logger.warning)
    if world.is_main:
        checkpointer.remove_stale_temp_files()
    mdist.barrier(world)  # all ranks: nobody reads while rank 0 tidies
    trainer = Trainer(
        train_config,
        world,
        parts,
        run_dir,
        key_codes=key_codes,
        checkpointer=checkpointer if world.is_main else None,
        hooks=build_hooks(train_config),
    )
    # rank 0 picks the checkpoint; every rank reads that file (the run directory is shared)
    chosen = mdist.main_only(checkpointer.latest_loadable, world)
    chosen = mdist.broadcast_object(chosen, world)  # all ranks
    if chosen is not None:
        mdist.main_first(lambda: trainer.load_state_dict(load_file(chosen)), world)
        logger.info(trainer.resume_report(chosen))
    else:  # a run that starts over never passes an earlier run's best model for its own
        mdist.main_only(lambda: best.discard_leftover(run_dir, logger.warning), world)

    def start_tracking():
        save_encoder_files(
            encoder, run_dir
        )  # after the resume check: never overwrite a run's encoder
        wandb = (
            {"project": config.log.wandb_project_name, "mode": config.log.wandb_mode}
            if config.log.log_wandb
            else None
        )
        return Tracker(
            run_dir,
            config_for_file(config),
            wandb,
            trainer.progress.step,
            tensorboard=config.log.log_tensorboard,
        )

    trainer.tracker = mdist.main_only(start_tracking, world) or NullTracker()
    return trainer


# ------------------------------------------------------------------ pieces
def resampled_rows(first_codes: np.ndarray, train_config: TrainConfig):
    """epoch -> the epoch's training rows with --upsample-below / --downsample-top (the
    same on every rank: seed and epoch only), or None: every row once."""
    from mixer.data.inputs.resample import epoch_rows, is_active

    if not is_active(train_config.upsample_below, train_config.downsample_top):
        return None
    return lambda epoch: epoch_rows(
        first_codes,
        train_config.seed,
        epoch,
        train_config.upsample_below,
        train_config.downsample_top,
    )


def place_model(model: MixerModel, config: RunConfig, world: mdist.World):
    """Freeze, move, compile and wrap, in that order. Also returns what every
    rank calls after the last backward of a step (mixer.distributed.gradsync)."""
    if config.model.freeze_encoder:
        for parameter in model.encoder.parameters():
            parameter.requires_grad_(False)
    model.to(world.device)
    if config.train.compile:
        if world.device.startswith("cuda"):
            model = torch.compile(model)
        else:
            logger.warning(
                "--compile skipped on CPU: compiling this model for the CPU took more "
                "than 5 minutes for a 2-step run here; use --compile on GPUs"
            )
    grad_sync = no_grad_sync
    if world.is_distributed:
        if config.dist.embedding_sync == "rows":
            grad_sync = take_out_of_ddp(model)  # before wrapping
        model = torch.nn.parallel.DistributedDataParallel(
            model,
            device_ids=[world.local_rank] if world.device.startswith("cuda") else None,
            find_unused_parameters=config.dist.find_unused_parameters
            or config.model.freeze_encoder,
            bucket_cap_mb=config.dist.ddp_bucket_cap_mb,
            static_graph=config.dist.static_graph,
            gradient_as_bucket_view=True,
        )
    return model, grad_sync


def build_optimizer(
    model: torch.nn.Module, learning_rate: float, head_lr_scale: float, weight_decay: float
) -> torch.optim.Optimizer:
    """AdamW, fused: one kernel over all parameters instead of a loop over
    tensors (6.6x faster for minilm-l6 on one CPU thread; see
    benchmarks/optimizer_step.py). Falls back to the loop on devices without
    the kernel."""
    groups = parameter_groups(model, learning_rate, head_lr_scale)
    try:
        return torch.optim.AdamW(groups, lr=learning_rate, weight_decay=weight_decay, fused=True)
    except RuntimeError:
        return torch.optim.AdamW(groups, lr=learning_rate, weight_decay=weight_decay)


def parameter_groups(model: torch.nn.Module, learning_rate: float, head_lr_scale: float) -> list:
    """Encoder at the learning rate, heads at head_lr_scale times it."""
    encoder, heads = [], []
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            (encoder if ".encoder." in f".{name}" else heads).append(parameter)
    groups = [{"params": heads, "lr": learning_rate * head_lr_scale}]
    return ([{"params": encoder, "lr": learning_rate}] if encoder else []) + groups


def coding_step(
    run_dir: str, config: RunConfig, formatter, sample, val_rows: int, full: bool, walks=()
):
    """The end-of-run step on the scored rows (mixer.coding.scores): which validation
    rows chose something, the code system's levels, the user's breakdown columns, the
    crosswalks whose class level is reported beside the codes'."""
    from mixer.coding.scores import CodingStep, chose_mask

    tuned_on = None if not config.train.tune_threshold else "all" if full else "sample"
    chose = chose_mask(val_rows, sample, bool(config.train.keep_best), tuned_on)
    return CodingStep(
        run_dir,
        formatter.kind,
        config.data.report_cols,
        chose,
        os.path.basename(os.path.abspath(run_dir)),
        log=logger.info,
        crosswalks=walks,
    )


def crosswalks(config: RunConfig, formatter=None) -> list:
    """--crosswalk's tables (mixer.data.labels.crosswalk), read with the model's code system
    (`formatter`; None: the names and files checked): each a level of classes the scored rows
    carry and the run's end reports beside the codes. A score (hiscam) has no classes to guarantee:
    refused."""
    from mixer.data.labels.crosswalk import check_names, load_crosswalk

    options = config.data.table_options("crosswalk")
    walks = [load_crosswalk(name, formatter, options) for name in config.data.crosswalk or []]
    check_names(walks)
    for walk in walks:
        if walk.numeric:
            raise UserError(
                f"--crosswalk {walk.name}: a score, not classes, has no class level to report; "
                "name a crosswalk of classes (hisclass, hisclass_5, socpo or a table)"
            )
    return walks


def check_max_len(max_len: int, encoder_config) -> None:
    limit = getattr(encoder_config, "max_position_embeddings", None)
    if limit and max_len > limit:
        raise UserError(
            f"--max-len {max_len} is longer than the encoder takes ({limit} positions); "
            f"pass --max-len {limit} or less"
        )


def model_extra(
    config: RunConfig, formatter, encoder_source: str, start, thresholds: Thresholds
) -> dict:
    """What predict.py needs besides the weights, stored in config.json; and where the
    starting weights came from."""
    return {
        "mixer_version": __version__,
        "formatter": formatter.to_dict(),
        "max_len": start.recipe.max_len,
        "input_col": config.data.input_col,
        "context_cols": list(config.data.context_cols),
        "language": config.data.language,
        "language_col": config.data.language_col,
        "threshold": thresholds.default,
        "thresholds": thresholds.table,
        "encoder_source": encoder_source,
        "input_recipe": start.recipe.to_dict(),
        "source": start.record(),
        "audited": audited_descriptions(config, start),
    }


def audited_descriptions(config: RunConfig, start) -> list:
    """The descriptions of audit rows this run, and the run it starts from, trained on
    (--train-on-audit; a resumed run reuses data prepared with it): the next audit of
    its predictions leaves them out."""
    from mixer.audit.train_on import trained_descriptions
    from mixer.models.sources import run_config

    data = config.data
    previous = run_config(start.run_dir).get("audited") if start.kind == "run" else None
    tables = (
        []
        if not data.train_on_audit
        else [
            (path, data.table_options(role), data.input_col)
            for role, paths in (
                ("dataset", [data.dataset] if data.dataset else []),
                ("train_data", data.train_data),
                ("val_data", data.val_data),
            )
            for path in paths
        ]
    )
    return trained_descriptions(
        data.extra_train, data.table_options("extra_train"), previous, tables
    )


def starting_thresholds(config: RunConfig, start) -> tuple:
    """The flat thresholds the run evaluates with and stores for prediction (until
    --tune-threshold replaces them): a start that keeps its code system keeps its
    thresholds by language (OccCANINE's table, 0.31 for languages outside it), unless
    --no-inherit-thresholds. --threshold sets the default for the other languages
    (and every language, without a table). Returns (the Thresholds, where they came from)."""
    inherit = config.train.inherit_thresholds
    table, default, origin = {}, 0.5, "the default"
    if start.base is not None and inherit is not False:
        if start.kind == "occcanine":
            from mixer.models.occcanine import LANGUAGE_THRESHOLDS

            table, default = dict(LANGUAGE_THRESHOLDS), LANGUAGE_THRESHOLDS["unk"]
        elif start.kind == "run":
            from mixer.models.sources import run_config

            previous = run_config(start.run_dir)
            table, default = dict(previous.get("thresholds") or {}), previous.get("threshold", 0.5)
        origin = f"the starting model's ({start.origin})"
    elif inherit:
        raise UserError(
            "--inherit-thresholds: the run starts from no model whose code system it "
            "keeps (a new encoder, or --only-encoder); leave the flag out"
        )
    if config.train.threshold is not None:
        default = config.train.threshold
        origin = "set by --threshold" + (f", by language {origin}" if table else "")
    return Thresholds.of(default, table), origin


def length_groups(config, device: str, resumed: Optional[dict] = None) -> int:
    """Groups of similar length per training micro-batch (mixer.data.inputs.dataset.Collator): the
    flag's. Otherwise, resuming, what the run used (1 for a run from before groups). Otherwise 2
    on a CPU, where a step's time follows its padded tokens, and 1 on a GPU, which runs
    one wide batch about as fast as a narrow one. DDP's static graph cannot take the
    unsynchronised backward passes of groups (or of --grad-accum-steps)."""
    requested = config.train.length_groups
    if config.dist.static_graph:
        if (requested or 1) > 1 or config.train.grad_accum_steps > 1:
            raise UserError(
                "--static-graph: DDP's static graph cannot sum several backward passes "
                "per step (--length-groups above 1, --grad-accum-steps above 1); "
                "leave one of them out"
            )
        return 1
    if requested is not None:
        return requested
    if resumed is not None:
        return int(resumed.get("train", {}).get("length_groups") or 1)
    return 1 if device.startswith("cuda") else 2


def describe_groups(groups: int, padding: InputPadding) -> str:
    if padding.fixed:
        return f"micro-batches padded whole: {padding.describe()} (--length-groups has no effect)"
    if groups == 1:
        return f"micro-batches padded whole (--length-groups 1); {padding.describe()}"
    return (
        f"micro-batches cut into at most {groups} groups of similar length, each padded on its own "
        f"(--length-groups {groups}); {padding.describe()}"
    )


def language_rows(langs) -> dict:
    """Rows by language, the most frequent first (the model card's)."""
    names, counts = np.unique(np.asarray(langs, dtype=str), return_counts=True)
    return {str(names[i]): int(counts[i]) for i in np.argsort(-counts, kind="stable")}


def describe_noise(noise: NoiseConfig, train_langs, eval_noise: int) -> str:
    parts = []
    if noise.prob and noise.edits:
        parts.append(
            f"spelling noise on {noise.prob:g} of the training rows each draw "
            f"({noise.edits} edits; --no-augmentation to switch off)"
        )
    else:
        parts.append("no spelling noise")
    if noise.unknown_prob:
        _, names = language_codes(train_langs)  # the distinct languages, not a string per row
        known = bool((names.astype(str) != "unk").any())
        parts.append(
            f"language 'unk' for {noise.unknown_prob:g} of the draws"
            + ("" if known else " (no effect: every row's language is unknown)")
        )
    parts.append(
        f"noised validation copy with {eval_noise} edits per row"
        if eval_noise
        else "no noised validation copy"
    )
    return "training inputs: " + "; ".join(parts)


def report_setup(
    world,
    train_config: TrainConfig,
    sampler,
    total_steps,
    learning_rate,
    n_train,
    n_val,
    n_codes,
    encoder_source,
    model,
    more=(),
) -> None:
    devices = mdist.gather_to_main(world.device, world)  # all ranks
    if not world.is_main:
        return
    parameters = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    scaled = (
        f" (--scale-lr: {train_config.learning_rate:g} x "
        f"{sampler.global_batch_size // train_config.batch_size})"
        if train_config.scale_lr
        else ""
    )
    lines = [
        f"mixer {__version__}: world size {world.world_size} ({world.num_nodes} node(s) x "
        f"{world.local_world_size} process(es)), backend {world.backend or 'none'}, "
        f"launcher {world.launcher}",
        "  devices: " + ", ".join(f"rank {r} {d}" for r, d in enumerate(devices)),
        f"  batch per process {train_config.batch_size}, "
        f"gradient accumulation {train_config.grad_accum_steps}, "
        f"global batch {sampler.global_batch_size}",
        f"  steps per epoch {sampler.steps_per_epoch}, total steps {total_steps}, "
        f"learning rate {learning_rate:g}{scaled}, precision {train_config.precision}",
        f"  data: {n_train} training rows"
        + (
            f" (resampled: {sampler.rows_per_epoch} per epoch)"
            if sampler.rows_per_epoch != n_train or sampler.epoch_rows is not None
            else ""
        )
        + f", {n_val} validation rows, {n_codes} codes",
        f"  encoder: {encoder_source}; {parameters / 1e6:.1f}M parameters, "
        f"{trainable / 1e6:.1f}M trainable",
    ] + [f"  {line}" for line in more]
    logger.info("\n".join(lines))


def report_end(metrics: dict, run_dir: str, kept: Optional[dict] = None) -> None:
    """The final metrics, naming the weights they score, and the model predict.py uses."""

    def values(row):
        return ", ".join(
            f"{k[4:]} {v:.4f}" for k, v in row.items() if k.startswith("val_") and k != "val_rows"
        )

    if kept is None:
        if metrics:
            logger.info("validation: " + values(metrics))
        logger.info(
            f"model: {os.path.join(run_dir, MODEL_FILE)} (predict with: python predict.py "
            f"--checkpoint {run_dir} --input FILE --output FILE)"
        )
        return
    if metrics:
        logger.info(
            f"validation of the last step's weights (step {metrics['step']}, "
            f"{os.path.join(run_dir, MODEL_FILE)}): " + values(metrics)
        )
    best_dir = os.path.join(run_dir, best.BEST_DIR)
    logger.info(
        f"validation of the best model (step {kept['step']}, epoch {epoch_number(*kept['place'])}, "
        f"{best_dir}): " + values(kept["metrics"])
    )
    logger.info(
        f"model: {best_dir}, the best by {kept['metric']} (predict with: python predict.py "
        f"--checkpoint {run_dir} --input FILE --output FILE; the last step's weights: "
        f"--checkpoint {os.path.join(run_dir, MODEL_FILE)})"
    )
