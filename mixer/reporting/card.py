"""The model card: README.md in every run directory, in its best model's directory and
in the OccCANINE-layout export, in the Hugging Face layout (a YAML header, then text).

What a colleague needs without the code. The card gives the command that made the model, its data
(files, rows, fingerprint, languages, code system, key size), where its weights
started, the recipe (learning rates, noise, epochs, why it stopped). It gives the validation
metrics of the very weights it describes (as written and noised; per language where there
are several), then the thresholds prediction will use (as stored for predict.py:
mixer.reporting.metrics.Thresholds) and how to predict with it. Every figure comes from
what the run measured or recorded; a figure the run has not measured is left out,
never estimated.

`run_facts` gathers what a job of the run knows at its start: its command, launch,
layout and settings. The training state keeps every job's, so that the card of a run
resumed in another layout or with other flags names them all. `render` adds the
weights it describes. Plain values in, text out: tested without training.
"""

from __future__ import annotations

import io
import json
import os
import shlex
from typing import Optional

from mixer.core.config import RunConfig
from mixer.models.family import family

CARD = "README.md"
CARD_DATA = "card.json"  # what README.md was made from: the OccCANINE export makes its card from it
HEADS = (("flat", "flat head"), ("seq2seq", "seq2seq head"))


def run_facts(
    config: RunConfig,
    stamp: dict,
    formatter,
    key_size: int,
    languages: dict,
    start,
    recipe_line: str,
    layout: str,
    evaluated_rows: int,
    encoder_source: str,
    launch: Optional[str] = None,
) -> dict:
    """What the card says of a run before any evaluation (mixer.training.run builds it;
    config.train holds the precision the run computes in). "job": this job's command and
    settings, which the training state adds to its list of jobs (Progress.jobs)."""
    from mixer.version import __version__

    command = list(config.log.command)
    if command and command[0].endswith(".py"):
        command = ["python"] + command
    data = config.data
    files = [
        (item["name"], item.get("xxh3_128", ""))
        for part in (stamp.get("inputs") or {}).values()
        for item in part
    ]
    t = config.train
    return {
        "name": os.path.basename(os.path.abspath(config.save_dir)),
        "version": __version__,
        "data": {
            "files": files,
            "rows": stamp.get("rows", {}),
            "digest": stamp.get("digest", ""),
            "languages": languages,
            "input_col": data.input_col,
            "context_cols": list(data.context_cols),
            "system": formatter.kind,
            "block_size": formatter.block_size,
            "codes_per_row": formatter.max_num_codes,
            "key_size": key_size,
        },
        "start": {
            "encoder": encoder_source,
            "kind": start.kind,
            "origin": start.origin,
            "family": start.family,
        },
        "job": {
            "command": shlex.join(command) if command else "",
            "launch": launch,
            "layout": layout,
            "recipe": recipe_line,
            "precision": t.precision,
            "weight_decay": t.weight_decay,
            "evaluated_rows": evaluated_rows,
            "eval_noise": t.eval_noise,
            "keep_best": t.keep_best,
            "patience": t.early_stopping_patience,
            "min_delta": t.early_stopping_min_delta,
        },
    }


def describe_launch(launcher: str, world_size: int, nodes: int, per_node: int) -> Optional[str]:
    """How the command ran when it ran as several processes (the card's), else None."""
    if world_size <= 1:
        return None
    by = {
        "torchrun": "torchrun",
        "torch.distributed.launch": "torch.distributed.launch",
        "slurm": "srun",
    }.get(launcher, "a launcher")
    return f"launched by {by} as {world_size} processes ({nodes} node(s) x {per_node})"


def jobs_of(facts: dict, progress: dict) -> list:
    """The jobs that trained the weights, each with the steps it trained ("from", "to").
    A job that trained none (a finished run run again) is left out, and consecutive jobs
    with the same command and settings (a requeued job) are one."""
    recorded = progress.get("jobs") or [dict(facts["job"], from_step=0)]
    ends = [job["from_step"] for job in recorded[1:]] + [progress["step"]]
    spans = [(job, end) for job, end in zip(recorded, ends) if end > job["from_step"]] or [
        (recorded[-1], ends[-1])
    ]
    jobs = []
    for job, end in spans:
        settings = {k: v for k, v in job.items() if k != "from_step"}
        if jobs and {k: v for k, v in jobs[-1].items() if k not in ("from", "to")} == settings:
            jobs[-1]["to"] = end
        else:
            jobs.append(dict(settings, **{"from": job["from_step"], "to": end}))
    return jobs


def _per_job(jobs: list, text) -> str:
    """One value when every job had it, else each value with the steps it held for."""
    groups = []
    for job in jobs:
        value = text(job)
        if groups and groups[-1][0] == value:
            groups[-1][2] = job["to"]
        else:
            groups.append([value, job["from"], job["to"]])
    if len(groups) == 1:
        return groups[0][0]
    return "; ".join(f"{value} (steps {a:,} to {b:,})" for value, a, b in groups)


def model_card(
    facts: dict,
    where: str,
    stored: dict,
    progress: dict,
    best: Optional[dict],
    last: dict,
    export: Optional[dict] = None,
    coding: Optional[dict] = None,
) -> str:
    """The card of the run's best model (`best`, its record: mixer.training.best) or, when
    it kept none, of its last step's weights (`last`: step, place, metrics, table).
    `stored`: the config.json those weights have or get, whose thresholds prediction
    will use; `where`: the path to predict with. `export` (mixer.cli.export_occcanine):
    the weights written elsewhere ("run": the run directory, "thresholds_where": how
    their readers get thresholds, "measured_with": the run's Thresholds, which its
    figures were measured with). `coding`: the summary of the weights' scores
    (mixer.coding.scores.summarise) with "files", the card's path to them, or None."""
    from mixer.reporting.metrics import Thresholds

    run = export["run"] if export else "RUN"
    if best is not None:
        model = dict(
            which="best",
            step=best["step"],
            place=best["place"],
            metric=best["metric"],
            value=best["value"],
            metrics=best["metrics"],
            table=best.get("table"),
            conditions=best.get("conditions") or {},
            other=(
                f"The run's last step ({progress['step']:,}) left other weights: "
                f"`{os.path.join(run, 'model.safetensors')}` "
                f"(`--checkpoint {shlex.quote(os.path.join(run, 'model.safetensors'))}`)."
                if progress["ended"]
                else None
            ),
        )
    else:
        model = dict(which="last", other=None, **last)
    thresholds = Thresholds.of(stored.get("threshold", 0.5), stored.get("thresholds"))
    model.update(
        where=where,
        progress=progress,
        thresholds=thresholds,
        thresholds_origin=stored.get("thresholds_from", "the run's"),
        export=export,
        coding=coding,
    )
    if export:
        model["thresholds_where"] = export["thresholds_where"]
        if export["measured_with"] != thresholds:
            model["thresholds_where"] += (
                f". The flat head's validation figures above were measured with "
                f"the run's thresholds, {export['measured_with'].describe()}"
            )
    return render(facts, model)


def stored_thresholds_text() -> str:
    return "stored in `config.json`, and predict.py and `mixer.load` use them unless given `--threshold`"


def render(facts: dict, model: dict) -> str:
    """The card of one model of the run. model: which ("best" | "last"), where (its
    directory), step, place (epochs completed, rows of the next: its epoch), metrics
    (logs.csv's val_ values of its evaluation), table (its evaluation table as CSV, or
    None). It also holds conditions (a best's: what its value was measured with), thresholds
    (the Thresholds prediction uses), thresholds_origin, thresholds_where (how they reach
    prediction; default: config.json). Last come progress (step, total_steps, planned_epochs, epochs
    done, stop_reason, elapsed, ended, jobs) and other (a line on the run's other weights, or
    None)."""
    return "---\n" + _header(facts, model) + "---\n\n" + "\n".join(_body(facts, model)) + "\n"


def _header(facts: dict, model: dict) -> str:
    import yaml

    data = facts["data"]
    header = {
        "library_name": "mixer",
        "pipeline_tag": "text-classification",
        "tags": ["mixer", "occupational-coding", data["system"]],
    }
    languages = sorted(lang for lang in data["languages"] if lang != "unk")
    if languages:
        header["language"] = languages
    origin = facts["start"]["origin"]
    if (
        origin and "/" in origin and not os.path.exists(origin)
    ):  # a hub id: Christianvedel/OccCANINE_s2s_mix
        header["base_model"] = origin
    measured = [(name, value) for name, value in _headline(model["metrics"]) if value is not None]
    if measured:
        header["model-index"] = [
            {
                "name": facts["name"],
                "results": [
                    {
                        "task": {
                            "type": "text-classification",
                            "name": f"occupational coding ({data['system']})",
                        },
                        "dataset": {
                            "type": "validation-rows",
                            "name": ", ".join(f for f, _ in data["files"]) or "data",
                            "split": "validation",
                        },
                        "metrics": [
                            {
                                "type": "accuracy" if "accuracy" in name else "f1",
                                "name": name,
                                "value": round(float(value), 4),
                            }
                            for name, value in measured
                        ],
                    }
                ],
            }
        ]
    return yaml.safe_dump(header, sort_keys=False, allow_unicode=True)


def _headline(metrics: dict) -> list:
    """(name, value) of each head's accuracy and F1, as written and noised."""
    return [
        (
            f"{label} {kind}" + (" (noised)" if noisy else ""),
            metrics.get(f"val_{'noisy_' if noisy else ''}{head}_{kind}"),
        )
        for noisy in (False, True)
        for head, label in HEADS
        for kind in ("accuracy", "f1")
    ]


def _body(facts: dict, model: dict) -> list:
    data, progress = facts["data"], model["progress"]
    jobs = jobs_of(facts, progress)
    lines = [
        f"# {facts['name']}",
        "",
        f"A text classifier made with mixer {facts['version']}: it reads `{data['input_col']}`"
        + (f" (with {', '.join(data['context_cols'])})" if data["context_cols"] else "")
        + f" and writes {data['system']} codes ({data['key_size']:,} codes in its key; up to "
        f"{data['codes_per_row']} per row, in blocks of {data['block_size']}) with two heads: "
        "a flat head (a probability for every code of the key) and a seq2seq decoder.",
        "",
    ]
    lines += ["## Which weights", "", _which(model)]
    if model.get("other"):
        lines += ["", model["other"]]
    lines += ["", "## How it was made", ""] + _commands(jobs)
    where = (
        f"step {progress['step']:,} of {progress['total_steps']:,} planned, "
        f"{progress['epochs']:.2f} of {progress['planned_epochs']} epochs"
    )
    took = (
        f"; {_duration(progress['elapsed'])} of training, evaluations included"
        if progress["elapsed"]
        else ""
    )
    if progress["ended"]:
        lines += [
            f"Training ended at {where}: {progress['stop_reason'] or 'the planned end'}{took}.",
            "",
        ]
    else:
        lines += [
            f"Training is in progress, at {where}{took}; this card is rewritten at each best "
            "model and at the end.",
            "",
        ]
    lines += ["| | |", "|---|---|"]
    files = "; ".join(
        f"`{name}` (xxh3-128 {digest})" if digest else f"`{name}`" for name, digest in data["files"]
    )
    rows = data["rows"]
    lines += [
        f"| data | {files} |" if files else "| data | |",
        f"| rows | {rows.get('train', 0):,} training, {rows.get('val', 0):,} validation (each "
        f"evaluation reads {_per_job(jobs, lambda j: format(j['evaluated_rows'], ','))}) |",
        f"| fingerprint | prepared data {data['digest']} (`prepared.json`) |",
        "| languages | "
        + (
            ", ".join(f"{lang} {n:,}" for lang, n in data["languages"].items()) + " (training rows)"
            if data["languages"]
            else "not given"
        )
        + " |",
        f"| starting weights | {_start(facts['start'])} |",
        f"| recipe | {_per_job(jobs, lambda j: j['recipe'].removeprefix('recipe: '))} |",
        f"| batch | {_per_job(jobs, _batch)} |",
        f"| length | {progress['planned_epochs']} epoch(s) planned, {progress['total_steps']:,} steps; "
        "the learning rate warms up, then falls linearly to 0 at the planned end |",
    ]
    if any(job["keep_best"] for job in jobs):
        lines.append(f"| best model | {_per_job(jobs, _keeping)} |")
    lines += ["", "## Validation metrics", ""] + _metrics(model, jobs[-1])
    rule = (
        f"of at least {model['thresholds'].describe()}, and always its most probable code"
        if family(facts["start"]["family"]).flat_keep_best
        else f"above {model['thresholds'].describe()}, no code forced (OccCANINE's rule)"
    )
    lines += [
        "",
        "## Thresholds",
        "",
        f"The flat head predicts the codes with a probability {rule}; these thresholds are "
        f"{model['thresholds_origin']}, {model.get('thresholds_where') or stored_thresholds_text()}.",
    ]
    if model.get("coding"):
        lines += ["", "## Confidence and the production curve", ""] + _coding(model["coding"])
    where = model["where"]
    lines += [
        "",
        "## How to predict",
        "",
        "```bash",
        f"python predict.py --checkpoint {shlex.quote(where)} --input records.csv --output codes.csv",
        "```",
        "",
        "From Python, after `import mixer`:",
        "",
        "```python",
        f"model = mixer.load({json.dumps(where, ensure_ascii=False)})",
        'model.predict(["farm labourer", "wine and spirit merchant"])',
        "```",
    ]
    return lines


def _coding(coding: dict) -> list:
    """Each head's share coded at the target accuracy on the scored rows, its temperature and
    expected calibration error, and the plots (the run's end: mixer.coding.scores)."""
    heads = [h for h, _ in HEADS if h in coding["heads"]]
    rows = " and ".join(f"{n:,} {name}" for name, n in coding["splits"].items())
    target = coding["target"]
    lines = [
        f"Scored at the end on {rows} rows (`{coding['files']}scores.parquet`). A row's confidence is "
        "the probability the model gives its whole code set. The first share is what `predict.py "
        f"--target-accuracy {target:g}` codes on new rows: its threshold keeps that accuracy at confidence "
        f"{coding['confidence']:g}, chosen on the scored rows that chose nothing, for a file of "
        f"{coding['rows_to_code']:,} rows like them (docs/coding.md). The second is read off the "
        "production curve of these rows: a point estimate on them, not a promise for new rows.",
        "",
        "| | " + " | ".join(f"{h} head" for h in heads) + " |",
        "|---|" + "---|" * len(heads),
    ]

    def row(label, cell):
        lines.append(f"| {label} | " + " | ".join(cell(coding["heads"][h]) for h in heads) + " |")

    row(
        f"coded on new rows at {target:.0%} accuracy (the guarantee)",
        lambda e: (
            "no held-out rows"
            if e.get("guaranteed_share") is None
            else f"{e['guaranteed_share']:.0%}"
        ),
    )
    row(
        f"coded at {target:.0%} accuracy, read off these rows' curve",
        lambda e: "none" if e["coded_share"] is None else f"{e['coded_share']:.0%} of the rows",
    )
    for level in coding["heads"][heads[0]].get("levels", {}) if heads else ():
        row(  # each crosswalk's class level (--crosswalk, --target-level <level>)
            f"classes ({level}) coded on new rows at {target:.0%} accuracy (the guarantee), "
            "realised on the scored rows",
            lambda e: _class_guarantee(e["levels"][level]),
        )
        row(
            f"classes ({level}) coded at {target:.0%} accuracy, read off these rows' curve",
            lambda e: (
                "none"
                if e["levels"][level]["coded_share"] is None
                else f"{e['levels'][level]['coded_share']:.0%} of the rows"
            ),
        )
    row("temperature", lambda e: f"{e['temperature']:.3f}")
    row(
        "expected calibration error, raw -> calibrated",
        lambda e: f"{e['ece_before']:.4f} -> {e['ece_after']:.4f}",
    )
    if all("held_out" in coding["heads"][h] for h in heads):
        held = coding["heads"][heads[0]]["held_out"]["rows"]
        row(
            f"the same on {held:,} rows it was not fit on",
            lambda e: f"{e['held_out']['ece_before']:.4f} -> {e['held_out']['ece_after']:.4f}",
        )
    lines += [
        "",
        f"The temperatures (`{coding['files']}calibration.json`) were fit on {coding['fit_on']}; "
        "they change no code, only the confidence a user reads.",
        "",
    ]
    lines += [
        f"![production curve, {h} head]({coding['files']}production_curve_{h}.png) "
        f"![reliability diagram, {h} head]({coding['files']}reliability_{h}.png)"
        for h in heads
    ]
    return lines


def _class_guarantee(entry: dict) -> str:
    """A class level's guarantee in the card: the share coded, and the realised accuracy of
    those scored rows."""
    if entry.get("guaranteed_share") is None:
        return "no held-out rows"
    realised = entry.get("realised_accuracy")
    return f"{entry['guaranteed_share']:.0%}" + (
        "" if realised is None else f" (realised accuracy {realised:.1%})"
    )


def _commands(jobs: list) -> list:
    """Each job's command, with its launch and the steps it trained when there are several."""
    if len(jobs) == 1:
        job = jobs[0]
        lines = ["```bash", job["command"], "```", ""] if job["command"] else []
        if job["launch"]:
            lines += [
                f"{job['launch'][0].upper()}{job['launch'][1:]}: each process ran this command.",
                "",
            ]
        return lines
    lines = [
        f"Made by {len(jobs)} jobs, each continuing from the training state the one before saved:",
        "",
    ]
    for job in jobs:
        lines += [
            f"Steps {job['from']:,} to {job['to']:,}"
            + (f", {job['launch']}" if job["launch"] else "")
            + ":",
            "",
        ] + (["```bash", job["command"], "```", ""] if job["command"] else [])
    return lines


def _batch(job: dict) -> str:
    return f"{job['layout']}; precision {job['precision']}, weight decay {job['weight_decay']:g}"


def _keeping(job: dict) -> str:
    if not job["keep_best"]:
        return "none kept"
    return f"kept by {job['keep_best']}" + (
        f"; early stopping after {job['patience']} evaluation(s) without an improvement of at least "
        f"{job['min_delta']:g}"
        if job["patience"]
        else ""
    )


def _which(model: dict) -> str:
    from mixer.core.config import epoch_number

    epoch = epoch_number(*model["place"])
    export = model.get("export")
    if export:
        run = export["run"]
        if model["which"] == "best":
            return (
                f"This directory holds, in OccCANINE's layout, the best evaluation of the run `{run}` by "
                f"{model['metric']}: {model['value']:.4f} at step {model['step']:,} (epoch {epoch}), "
                f"exported from `{os.path.join(run, 'best')}`."
            )
        return (
            f"This directory holds, in OccCANINE's layout, the weights of the last step of the run `{run}`, "
            f"step {model['step']:,} (epoch {epoch}), exported from `{os.path.join(run, 'model.safetensors')}`."
        )
    if model["which"] == "best":
        chosen = model.get("conditions", {}).get("rows")
        measured = int(model["metrics"].get("val_rows", 0))
        again = (
            f" (on the {chosen:,} validation rows every evaluation read; the figures below were "
            f"measured again at the end, on {measured:,} rows)"
            if chosen and measured and chosen != measured
            else ""
        )
        return (
            f"The best evaluation of the run by {model['metric']}: {model['value']:.4f} at step "
            f"{model['step']:,} (epoch {epoch}){again}, kept in `best/`; `--checkpoint RUN` and "
            "`mixer.load(RUN)` predict with these weights."
        )
    return f"The weights of the run's last step, step {model['step']:,} (epoch {epoch})."


def _start(start: dict) -> str:
    if start["kind"] == "encoder":
        return f"a new model: encoder {start['encoder']}, new heads"
    return f"{start['origin']} ({start['encoder']})"


def _metrics(model: dict, job: dict) -> list:
    metrics = model["metrics"]
    noised = any(k.startswith("val_noisy_") for k in metrics)
    rows = int(metrics.get("val_rows", 0)) or job["evaluated_rows"]
    edits = (model.get("conditions") or {}).get("eval_noise", job["eval_noise"])
    lines = [
        f"Measured at step {model['step']:,} on {rows:,} validation rows"
        + (f", as written and with {edits} typo(s) in every row (noised)" if noised else "")
        + ". Exact match: a row counts when the predicted code set equals the true set; F1: micro "
        "over codes (docs/evaluation.md)."
    ]
    if model["which"] == "best":
        lines[0] += (
            " These rows chose this model among the run's evaluations, so they score it "
            "optimistically: for an unbiased figure, hold out a test file, predict it and score "
            "it with evaluate.py."
        )
    lines += [
        "",
        "| | as written" + (" | noised" if noised else "") + " |",
        "|---|---" + ("|---" if noised else "") + "|",
    ]
    names = [("loss", "val_loss", None)] + [
        (f"{label} {kind}", f"val_{head}_{kind}", f"val_noisy_{head}_{kind}")
        for head, label in HEADS
        for kind in ("accuracy", "f1")
    ]
    for label, clean, noisy in names:
        if clean in metrics:
            cells = [_number(metrics[clean])] + (
                [_number(metrics.get(noisy)) if noisy else ""] if noised else []
            )
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    by_language = _by_language(model.get("table"))
    if by_language:
        lines += [
            "",
            "By language (the evaluation table's accuracy of the whole code, the OccCANINE "
            "paper's; `evaluation.csv`):",
            "",
        ] + by_language
    return lines


def _by_language(table: Optional[str]) -> list:
    """Per language, each head's accuracy at the longest number of digits, when the
    table has several languages."""
    if not table:
        return []
    import pandas as pd

    frame = pd.read_csv(io.StringIO(table), dtype={"lang": str}, keep_default_na=False)
    if "lang" not in frame.columns or frame["lang"].nunique() < 3:  # "all" and one language
        return []
    digits = frame["digits"].astype(str)
    frame = frame[digits == digits.iloc[-1]]
    heads = list(dict.fromkeys(frame["head"]))
    lines = ["| language | rows | " + " | ".join(heads) + " |", "|---|---|" + "---|" * len(heads)]
    for lang, part in frame.groupby("lang", sort=False):
        accuracy = dict(zip(part["head"], part["accuracy"]))
        lines.append(
            f"| {lang} | {int(part['n'].iloc[0]):,} | "
            + " | ".join(_number(accuracy.get(h)) for h in heads)
            + " |"
        )
    return lines


def _number(value) -> str:
    return "" if value is None or value != value else f"{float(value):.4f}"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, minutes = divmod(seconds // 60, 60)
    return (
        f"{hours} h {minutes} min"
        if hours
        else f"{minutes} min {seconds % 60} s"
        if minutes
        else f"{seconds} s"
    )


def data_text(data: dict) -> str:
    return json.dumps(data, indent=1)


def write(directory: str, text: str, data: Optional[dict] = None) -> None:
    """README.md, and card.json (what it was made from) first: a reader of the pair finds
    the data of this card or of a newer one."""
    from mixer.core.io import write_text

    if data is not None:
        write_text(os.path.join(directory, CARD_DATA), data_text(data))
    write_text(os.path.join(directory, CARD), text)


def read_data(directory: str) -> Optional[dict]:
    path = os.path.join(directory, CARD_DATA)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)
