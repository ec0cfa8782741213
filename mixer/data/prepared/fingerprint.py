"""Fingerprints: the identity of a run's prepared data (each file by its content and by
how it was read, and the data settings), so that a run directory's prepared files are
reused for the same input only, and what changed is said in words."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Optional

from mixer.core.config import READ_OPTIONS, TABLE_ROLES, DataConfig, TableOptions, option_dest
from mixer.data.tables import ipums
from mixer.data.tables.reading import canonical_options, check_input_path, table_kind

FINGERPRINT_SETTINGS = (
    "input_col",
    "context_cols",
    "target_cols",
    "language",
    "language_col",
    "formatter",
    "block_size",
    "use_within_block_sep",
    "drop_bad_labels",
    "allow_codes_shorter_than_block_size",
    "share_val",
)
# settings that join the identity only when set (how the files are read, optional
# labels and spellings), so runs prepared before they existed keep their fingerprint
OPTIONAL_SETTINGS = {
    "encoding": "utf-8",
    "sep": None,
    "sheet": None,
    "header_row": None,
    "ddi": None,
    "read_options": {},
    "empty_code_label": None,
    "zero_padded_codes": False,
    "share_calibration": 0.0,
    "report_cols": [],
}
HASH_BLOCK = 1 << 23


def content_hash(path: str) -> str:
    """xxh3-128 of the file's bytes: about 0.2 s per GB (docs/data.md)."""
    import xxhash

    digest = xxhash.xxh3_128()
    with open(path, "rb") as handle:
        while True:
            block = handle.read(HASH_BLOCK)
            if not block:
                return digest.hexdigest()
            digest.update(block)


def file_identity(path: str, file_flag: str, options: Optional[TableOptions] = None) -> dict:
    """What makes a file the same input: its bytes, not its path or time stamp, so a
    copy in a per-job directory is the same data and any edit is another. With the file's
    reading `options`, an IPUMS fixed-width extract's codebook too, which makes its rows."""
    check_input_path(path, file_flag)
    identity = {
        "name": os.path.basename(path),
        "bytes": os.path.getsize(path),
        "xxh3_128": content_hash(path),
    }
    if options is not None and table_kind(path, file_flag) == "ipums":
        codebook = ipums.ddi_path(path, options)
        identity["codebook"] = {
            "name": os.path.basename(codebook),
            "bytes": os.path.getsize(codebook),
            "xxh3_128": content_hash(codebook),
        }
    return identity


def _content(file: dict) -> list:
    """A file's identity as the digest takes it: its bytes and hash (and its codebook's)."""
    codebook = file.get("codebook")
    return [file["bytes"], file["xxh3_128"]] + (
        [codebook["bytes"], codebook["xxh3_128"]] if codebook else []
    )


def run_files(cfg: DataConfig) -> dict:
    """{role: [paths]}: every file the run reads, by role (mixer.core.config.TABLE_ROLES)."""
    files = (
        {"dataset": [cfg.dataset]}
        if cfg.dataset
        else {"train_data": list(cfg.train_data), "val_data": list(cfg.val_data)}
    )
    files.update(
        {
            "code_descriptions": [cfg.code_descriptions] if cfg.code_descriptions else [],
            "key": [cfg.key_file] if cfg.key_file else [],
            "extra_train": list(cfg.extra_train),
        }
    )
    return {role: paths for role, paths in files.items() if paths}


def reading_settings(cfg: DataConfig, files: dict, typed: bool = False) -> dict:
    """How the run's files are read, as part of its identity. Each option as the files
    make it mean (mixer.data.tables.reading.canonical_options: a typed value that only says what
    the file says by itself, such as --sep ',' on a file whose header uses ',', is the
    default). With `typed`, each option as given (how runs were identified before)."""
    values = {}
    for role, paths in files.items():
        given, canonical = cfg.table_options(role), None
        for option in READ_OPTIONS:
            value, default = getattr(given, option), getattr(TableOptions(), option)
            if not typed and value != default:
                canonical = canonical or [
                    canonical_options(path, given) for path in paths
                ]  # once a role
                if all(getattr(options, option) == default for options in canonical):
                    value = default
            if value != default:
                values[option_dest(role, option)] = value
    main = {k: v for k, v in values.items() if k in READ_OPTIONS}
    own = {k: v for k, v in values.items() if k not in READ_OPTIONS}
    return {**main, **({"read_options": own} if own else {})}


def fingerprint(cfg: DataConfig, seed: int, typed: bool = False) -> dict:
    """The identity of a run's prepared data: each role's files by content (training and
    validation apart, in order), how they are read, and the data settings."""
    files = run_files(cfg)
    inputs = {
        role: [
            file_identity(p, TableOptions(role=role).what, cfg.table_options(role)) for p in paths
        ]
        for role, paths in files.items()
    }
    settings = {k: getattr(cfg, k) for k in FINGERPRINT_SETTINGS}
    settings.update(
        {
            k: getattr(cfg, k)
            for k, default in OPTIONAL_SETTINGS.items()
            if k not in ("read_options",) + READ_OPTIONS and getattr(cfg, k) != default
        }
    )
    settings.update(reading_settings(cfg, files, typed))
    settings["seed"] = seed
    contents = {role: [_content(f) for f in files] for role, files in inputs.items()}
    digest = hashlib.sha256(json.dumps([contents, settings], sort_keys=True).encode()).hexdigest()
    return {"identity": "content", "inputs": inputs, "settings": settings, "digest": digest[:16]}


def run_stamp(
    cfg: DataConfig, seed: int, base=None, tokens: str = "mixer", typed: bool = False
) -> dict:
    """The fingerprint with what else fixes the prepared data: the decoder's token layout
    and the starting model (its layout and key)."""
    stamp = fingerprint(cfg, seed, typed)
    if tokens != "mixer":
        stamp["settings"]["tokens"] = tokens
        stamp["digest"] = hashlib.sha256(
            json.dumps([stamp["digest"], tokens]).encode()
        ).hexdigest()[:16]
    if base is not None:
        stamp["settings"]["start"] = base.fingerprint()
        stamp["digest"] = hashlib.sha256(
            json.dumps([stamp["digest"], stamp["settings"]["start"]], sort_keys=True).encode()
        ).hexdigest()[:16]
    return stamp


def same_as_legacy(old: dict, cfg: DataConfig, seed: int) -> bool:
    """Prepared by mixer 0.1 (files identified by path, size and time) from these very
    files and settings: accepted, so that runs started before the upgrade resume."""
    if old.get("identity") == "content" or "files" not in old:
        return False
    files = [cfg.dataset] if cfg.dataset else list(cfg.train_data) + list(cfg.val_data)
    stats = [[os.path.abspath(p), os.path.getsize(p), int(os.stat(p).st_mtime)] for p in files]
    legacy = (
        "input_col",
        "target_cols",
        "language",
        "language_col",
        "formatter",
        "block_size",
        "use_within_block_sep",
        "drop_bad_labels",
        "allow_codes_shorter_than_block_size",
        "share_val",
        "code_descriptions",
    )
    settings = {k: getattr(cfg, k) for k in legacy}
    settings["seed"] = seed
    digest = hashlib.sha256(json.dumps([stats, settings], sort_keys=True).encode()).hexdigest()
    return old.get("digest") == digest[:16]


def describe_difference(old: dict, new: dict) -> str:
    """What changed between two fingerprints, in words."""
    if old.get("identity") != "content":
        return "it was prepared by mixer 0.1, which identified files by path and time"
    changed = []
    for role in sorted(set(old.get("inputs", {})) | set(new["inputs"])):
        before = [_content(f) for f in old.get("inputs", {}).get(role, [])]
        after = [_content(f) for f in new["inputs"].get(role, [])]
        if before != after:
            names = ", ".join(f["name"] for f in old.get("inputs", {}).get(role, [])) or "none"
            changed.append(f"--{role.replace('_', '-')} differs (it was: {names})")

    def flat(settings: dict) -> dict:
        values = {k: v for k, v in settings.items() if k != "read_options"}
        return {**values, **settings.get("read_options", {})}

    before, after = flat(old.get("settings", {})), flat(new["settings"])
    defaults = {
        **{
            option_dest(role, option): getattr(TableOptions(), option)
            for role in TABLE_ROLES
            for option in READ_OPTIONS
        },
        **OPTIONAL_SETTINGS,
    }
    for name in list(after) + [k for k in before if k not in after]:
        default = defaults.get(name)
        if before.get(name, default) != after.get(name, default):
            flag = "--seed" if name == "seed" else "--" + name.replace("_", "-")
            changed.append(
                f"{flag} was {before.get(name, default)!r}, now {after.get(name, default)!r}"
            )
    return "; ".join(changed) or "the settings differ"
