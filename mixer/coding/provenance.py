"""Which model coded what: every predictions file predict.py writes carries what made it
(docs/coding.md, "Provenance").

- a sidecar `<output>.provenance.json`. It holds the model (its source, weights fingerprint,
  family, precision), the heads, thresholds and top-k, the calibration (temperature, bias)
  of each head, the target accuracy and the procedure that chose its threshold. It also
  holds the lookup table's fingerprint, the input file's fingerprint, mixer's version and,
  under `result`, the rows written, the rows each source coded and the shares coded
  automatically.
- under `options`, every option that changes the file: generated from predict.py's
  configuration (PredictConfig), every field but those UNRECORDED names with the reason it
  does not change the file, and those of the job's other outputs (each sink's flag and its
  own options, passed in by the job: mixer.prediction.sinks.unrecorded), so that a new option
  is recorded unless it is named there or declared by an output. A
  file an option names (--code-descriptions, --calibration-data, --lookup) is recorded by
  its name, size and hash; `tables` holds every file's reading options (--sep, --encoding,
  --sheet, --header-row, --lookup-sep, ...). Under `columns`, the columns the job read as
  mixer.data.tables.job_columns decided them (the run's where an option was unset).
- its `id` (a hash of everything but `result`) in the file's own metadata where the format
  has room: Parquet's key-value metadata (key mixer_provenance), Stata's data label.
  CSV and Excel carry the sidecar alone.
"""

from __future__ import annotations

import json
import os
from typing import Optional

VERSION = 1
from mixer.data.tables.sinks import SIDECAR_SUFFIX as SUFFIX  # noqa: E402 - one spelling, the sinks' check reads it

LABEL = "mixer provenance {id}"  # what the file's own metadata holds (at most 80 characters)


# PredictConfig's fields that do not change the predictions file, each with why; every other
# field is recorded under `options` (docs/coding.md, "Provenance")
UNRECORDED = {
    "checkpoint": "recorded under `model`: its source and its weights' fingerprint",
    "input": "recorded under `input`: its name, size and hash",
    "output": "recorded under `output`: the file's name",
    "batch_size": "rows per batch: the same codes, probabilities within rounding",
    "chunk_size": "rows read and written at a time: the same file",
    "store_memory": "memory of the distinct-input store before it spills to disk: the same file",
    "restart": "start over instead of continuing a killed job: the same file",
    "distributed": "one process or several: the same file",
    "debug": "tracebacks on errors",
    "calibrate": "--calibrate writes no predictions file",
}
FILES = {
    "code_descriptions": "--code-descriptions",
    "calibration_data": "--calibration-data",
    "lookup": "--lookup",
}  # recorded by their name, size and hash


def options_part(config, others: dict) -> dict:
    """Every option of `config` (a PredictConfig) that changes the file, as given (None:
    unset, the model's or the program's default); files by their identity; every file's
    reading options that were set. `others`: {field: why} of the fields that make the job's
    other outputs (passed in: mixer.prediction.sinks.unrecorded), not recorded either."""
    from mixer.core.options import flat_values
    from mixer.data.prepared.fingerprint import file_identity

    recorded = {}
    for name, value in flat_values(config).items():  # by the fields' own names, not sections
        if name in UNRECORDED or name in others:
            continue
        if name == "tables":
            value = {k: v for k, v in sorted(value.items()) if v is not None}
        elif name in FILES and value:
            value = file_identity(value, FILES[name])
        elif name == "crosswalk" and value:  # a user's table by its identity, as FILES
            from mixer.data.labels.crosswalk import CROSSWALKS

            value = [
                name if name.lower() in CROSSWALKS else file_identity(name, "--crosswalk")
                for name in value
            ]
        recorded[name] = value
    return recorded


def columns_part(config, predictor) -> dict:
    """The columns the job read (mixer.data.tables.job_columns): the run's where unset."""
    from mixer.data.tables.job_columns import job_columns

    return job_columns(
        predictor.config, config.data.input_col, config.data.language, config.data.language_col
    )._asdict()


def sidecar_path(output: str) -> str:
    return output + SUFFIX


def make(body: dict) -> dict:
    """The provenance of a file: `body` with its version and id."""
    import xxhash

    body = {"version": VERSION, **body}
    digest = xxhash.xxh3_128(
        json.dumps(body, sort_keys=True, default=str).encode("utf-8")
    ).hexdigest()
    return {"id": "p-" + digest[:16], **body}


def label(provenance: dict) -> str:
    return LABEL.format(id=provenance["id"])


def model_part(predictor, source: str) -> dict:
    """What the sidecar says of the model: its source, weights, family and numerics."""
    from mixer.audit.draw import model_fingerprint

    return {
        "source": source,
        "fingerprint": model_fingerprint(predictor),
        "family": predictor.family,
        "precision": predictor.precision,
        "quantize": predictor.quantize,
        "device": str(predictor.device).split(":")[0],
    }


def input_part(path: str) -> dict:
    from mixer.data.prepared.fingerprint import file_identity

    return file_identity(path, "--input")


def sidecar_text(provenance: dict, result: Optional[dict] = None) -> str:
    """The sidecar's text; predict.py writes it with the output as one step, after the
    output (mixer.data.tables.writing.commit_files), so a sidecar never describes another file."""
    return (
        json.dumps({**provenance, "result": result or {}}, indent=2, sort_keys=False, default=str)
        + "\n"
    )


def write_sidecar(output: str, provenance: dict, result: Optional[dict] = None) -> str:
    """The sidecar beside `output` (already in place), written whole or not at all."""
    from mixer.core.io import write_text

    path = sidecar_path(output)
    write_text(path, sidecar_text(provenance, result))
    return path


def read(output: str) -> dict:
    """A predictions file's provenance, read from its sidecar and checked against the id the
    file carries (where its format has room for one)."""
    from mixer.core.errors import UserError
    from mixer.data.tables.reading import file_label

    path = sidecar_path(output)
    if not os.path.exists(path):
        raise UserError(
            f"{output}: no {os.path.basename(path)} beside it; it was not written by predict.py "
            "(or the sidecar was moved)"
        )
    with open(path, encoding="utf-8") as handle:
        provenance = json.load(handle)
    carried = file_label(output)
    if carried is not None and carried != label(provenance):
        raise UserError(
            f"{output}: carries {carried!r}, its sidecar {path} says {provenance.get('id')!r}: the "
            "sidecar is another file's"
        )
    return provenance
