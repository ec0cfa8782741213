"""Every program's flags as data: the contract a change of the parsers keeps.

    python tests/contract/snapshot.py            # print the differences from parsers.json
    python tests/contract/snapshot.py --write    # accept today's parsers (say why in the commit)

Each flag's option strings, destination, number of values, default, choices, whether
it is required and its action; help texts are left out (they may be reworded).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SNAPSHOT = os.path.join(HERE, "parsers.json")


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return getattr(value, "__name__", repr(value))


def describe(parser: argparse.ArgumentParser) -> list:
    """The flags of one parser, in the order --help shows them."""
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        rows.append(
            {
                "options": list(action.option_strings) or [action.dest],
                "dest": action.dest,
                "nargs": _plain(action.nargs),
                "default": _plain(action.default),
                "choices": _plain(list(action.choices) if action.choices is not None else None),
                "required": bool(action.required),
                "action": type(action).__name__,
                "type": _plain(action.type),
            }
        )
    return rows


def parsers() -> dict:
    """Every program's parser by the program's name."""
    sys.path.insert(0, ROOT)
    from mixer.cli import entrypoints
    from mixer.cli import export_occcanine

    found = {
        "finetune.py": entrypoints.finetune_parser(),
        "train_mixer.py": entrypoints.train_mixer_parser(),
        "predict.py": entrypoints.predict_parser(),
        "evaluate.py": entrypoints.evaluate_parser(),
    }
    if hasattr(export_occcanine, "parser"):
        found["export_occcanine"] = export_occcanine.parser()
    return found


def snapshot() -> dict:
    return {name: describe(parser) for name, parser in parsers().items()}


def differences(old: dict, new: dict) -> list:
    """One line per flag added, removed or changed, by program."""
    lines = []
    for program in sorted(set(old) | set(new)):
        before = {row["dest"] + " " + " ".join(row["options"]): row for row in old.get(program, [])}
        after = {row["dest"] + " " + " ".join(row["options"]): row for row in new.get(program, [])}
        for name in sorted(set(before) | set(after)):
            if name not in after:
                lines.append(f"{program}: removed {name}")
            elif name not in before:
                lines.append(f"{program}: added {name}")
            elif before[name] != after[name]:
                changed = {
                    k: (before[name].get(k), after[name].get(k))
                    for k in after[name]
                    if before[name].get(k) != after[name].get(k)
                }
                lines.append(f"{program}: changed {name}: {changed}")
    return lines


def main() -> int:
    new = snapshot()
    if "--write" in sys.argv[1:]:
        with open(SNAPSHOT, "w") as out:
            json.dump(new, out, indent=1, sort_keys=True)
            out.write("\n")
        print(f"wrote {SNAPSHOT}")
        return 0
    with open(SNAPSHOT) as f:
        lines = differences(json.load(f), new)
    print("\n".join(lines) or "no differences")
    return 1 if lines else 0


if __name__ == "__main__":
    raise SystemExit(main())
