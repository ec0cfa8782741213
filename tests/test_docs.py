"""The README and docs/*.md stay true to the repository: every relative link (and #anchor)
resolves, every command in their bash blocks names a program that exists and flags it
accepts, and every repository path or mixer module written in backticks exists.

Fast (no training): one `--help` per program, cached. Each test lists every problem it
finds at once, so a move of many files shows all the stale references in one run."""

from __future__ import annotations

import functools
import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import ROOT, env_for_subprocess

DOCS = ["README.md", "CONTRIBUTING.md"] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))
)

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")


def read(name: str) -> str:
    with open(os.path.join(ROOT, name), encoding="utf-8") as handle:
        return handle.read()


def split_fences(text: str):
    """(prose lines, [(language, code text)]): prose with fenced blocks left out."""
    prose, blocks, inside, language, code = [], [], False, "", []
    for line in text.split("\n"):
        if FENCE.match(line.strip()):
            if inside:
                blocks.append((language, "\n".join(code)))
                inside, code = False, []
            else:
                inside, language = True, line.strip()[3:].strip()
            continue
        (code if inside else prose).append(line)
    return prose, blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed
    (letters, digits, '_', '-' and spaces kept), spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) -> text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@functools.lru_cache(maxsize=None)
def anchors(name: str) -> frozenset:
    prose, _ = split_fences(read(name))
    seen: dict = {}
    result = set()
    for line in prose:
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return frozenset(result)


def prose_without_code(name: str) -> str:
    prose, _ = split_fences(read(name))
    return INLINE_CODE.sub("", "\n".join(prose))


def test_docs_pages_exist_and_say_the_task_they_serve():
    assert len(DOCS) > 10, DOCS
    problems = []
    for name in DOCS[1:]:
        lines = [line for line in read(name).split("\n") if line.strip()]
        if not (
            lines and lines[0].startswith("# ") and len(lines) > 1 and lines[1].startswith("*For ")
        ):
            problems.append(f"{name}: should open with '# Title' and a line '*For <the task>...*'")
    assert not problems, "\n".join(problems)


def test_every_relative_link_resolves():
    problems = []
    for name in DOCS:
        for target in LINK.findall(prose_without_code(name)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(name), path)) if path else name
            if not os.path.exists(os.path.join(ROOT, resolved)):
                problems.append(f"{name}: link ({target}): no file {resolved}")
                continue
            if anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                problems.append(
                    f"{name}: link ({target}): {resolved} has no heading "
                    f"#{anchor} (it has: {', '.join(sorted(anchors(resolved)))})"
                )
    assert not problems, "broken links:\n" + "\n".join(problems)


# --- commands -------------------------------------------------------------------------------


def console_scripts() -> dict:
    """mixer-finetune -> ('mixer.entrypoints', 'finetune_cli'), from pyproject.toml."""
    scripts, inside = {}, False
    for line in read("pyproject.toml").split("\n"):
        if line.strip().startswith("["):
            inside = line.strip() == "[project.scripts]"
        elif inside and "=" in line:
            key, value = (part.strip().strip('"') for part in line.split("=", 1))
            scripts[key] = tuple(value.split(":"))
    return scripts


def module_file(module: str):
    """The file of a mixer module (mixer/a/b.py, or its package's __init__.py), or None."""
    base = os.path.join(ROOT, *module.split("."))
    for candidate in (
        base + ".py",
        os.path.join(base, "__main__.py"),
        os.path.join(base, "__init__.py"),
    ):
        if os.path.exists(candidate):
            return candidate
    return None


@functools.lru_cache(maxsize=None)
def accepted_flags(program: tuple) -> frozenset:
    """The --flags a program's --help lists (one run per program)."""
    kind, name = program
    if kind == "file":
        cmd = [sys.executable, os.path.join(ROOT, name), "--help"]
    elif kind == "module":
        cmd = [sys.executable, "-m", name, "--help"]
    else:  # console script: call its function as the installed command would
        module, function = console_scripts()[name]
        cmd = [
            sys.executable,
            "-c",
            f"import sys; sys.argv = [{name!r}, '--help']; "
            f"from {module} import {function}; sys.exit({function}())",
        ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, cwd=ROOT, timeout=300, env=env_for_subprocess()
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return frozenset(re.findall(r"(?<![\w-])(--[A-Za-z0-9][\w-]*)", proc.stdout))


def logical_lines(code: str):
    """Shell lines with backslash continuations joined."""
    return code.replace("\\\n", " ").split("\n")


def simple_commands(line: str):
    tokens = shlex.split(line, comments=True)
    command = []
    for token in tokens + ["&&"]:
        if token in ("&&", "||", ";", "|"):
            while command and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", command[0]):
                command.pop(0)  # VAR=value before the program
            if command:
                yield command
            command = []
        else:
            command.append(token)


def program_of(command: list, problems: list, where: str):
    """(program, its arguments) for a command of this project, else (None, [])."""
    head, rest = command[0], command[1:]
    if head in ("python", "python3"):
        if rest[:1] == ["-m"] and len(rest) > 1:
            module = rest[1]
            if module.split(".")[0] == "mixer":
                if module_file(module) is None:
                    problems.append(f"{where}: `python -m {module}`: no such module")
                    return None, []
                return ("module", module), rest[2:]
            if module in ("torch.distributed.run", "torch.distributed.launch"):
                return program_of(["torchrun"] + rest[2:], problems, where)
            return None, []  # pytest, venv, ...: not this project's
        if rest and rest[0].endswith(".py"):
            if not os.path.exists(os.path.join(ROOT, rest[0])):
                problems.append(f"{where}: `python {rest[0]}`: no such file")
                return None, []
            return ("file", rest[0]), rest[1:]
        return None, []  # python -c ...
    if head == "torchrun":
        for i, token in enumerate(rest):
            if token.endswith(".py"):
                bad = sorted(
                    flag_names(rest[:i]) - accepted_flags(("module", "torch.distributed.run"))
                )
                problems.extend(f"{where}: torchrun does not accept {flag}" for flag in bad)
                return program_of(["python"] + rest[i:], problems, where)
        problems.append(f"{where}: torchrun without a .py program")
        return None, []
    if head in console_scripts():
        return ("console", head), rest
    if head in ("bash", "sh", "sbatch") or head.endswith((".sh", ".sbatch")):
        for i, token in enumerate(command):
            if token.endswith((".sh", ".sbatch")):
                if not os.path.exists(os.path.join(ROOT, token)):
                    problems.append(f"{where}: {token}: no such script")
                    return None, []
                after = command[i + 1 :]
                programs = [j for j, arg in enumerate(after) if arg.endswith(".py")]
                if programs:  # scripts/train_multi_gpu.sh N finetune.py FLAGS
                    return program_of(["python"] + after[programs[0] :], problems, where)
                if token.endswith(".sbatch"):  # the template runs $SCRIPT, finetune.py by default
                    default = re.search(r"SCRIPT=\$\{SCRIPT:-([\w./-]+)\}", read(token))
                    return ("file", default.group(1) if default else "finetune.py"), after
                return None, []
        return None, []
    if head == "pip":
        for i, token in enumerate(rest[:-1]):
            if token in ("-r", "--requirement") and not os.path.exists(
                os.path.join(ROOT, rest[i + 1])
            ):
                problems.append(f"{where}: pip -r {rest[i + 1]}: no such file")
    return None, []


def flag_names(arguments: list) -> set:
    return {
        arg.split("=", 1)[0]
        for arg in arguments
        if arg.startswith("--") and len(arg) > 2 and not re.search(r"\s", arg)
    }


def test_every_command_names_a_program_that_exists_and_flags_it_accepts():
    """The README's bash blocks (and those of docs/*.md): `python X.py`, `python -m mixer.Y`,
    torchrun (its own flags too), the scripts/ launchers, the installed mixer-* commands."""
    problems, checked = [], {}
    for name in DOCS:
        _, blocks = split_fences(read(name))
        for number, (language, code) in enumerate(blocks, 1):
            if language not in ("bash", "sh", "shell", "console"):
                continue
            for line in logical_lines(code):
                for command in simple_commands(line):
                    where = f"{name}, code block {number}: {' '.join(command)[:70]}"
                    program, arguments = program_of(command, problems, where)
                    if program is None:
                        continue
                    checked[name] = checked.get(name, 0) + 1
                    for flag in sorted(flag_names(arguments) - accepted_flags(program)):
                        problems.append(f"{where}: {program[1]} does not accept {flag}")
    assert checked.get("README.md", 0) >= 5, f"too few commands of this project found: {checked}"
    assert not problems, "commands:\n" + "\n".join(problems)


# --- paths in backticks ---------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def tracked() -> tuple:
    """(top-level names, basenames of every file) of the repository."""
    files = subprocess.run(
        ["git", "ls-files"], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.split()
    return frozenset(f.split("/")[0] for f in files), frozenset(os.path.basename(f) for f in files)


MODULE = re.compile(r"(?<![\w./-])mixer(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w./:-])(?:\.?[\w-]+(?:/[\w.-]+)+/?|[\w-]+\.(?:py|sh|sbatch)\b)")


def stale_module(name: str):
    """Why mixer.a.b (a module, or a name in a package's __init__) does not exist, else None."""
    package = os.path.join(ROOT, "mixer")
    for part in name.split(".")[1:]:
        if os.path.exists(os.path.join(package, part + ".py")):
            return None
        if os.path.isdir(os.path.join(package, part)):
            package = os.path.join(package, part)
            continue
        init = os.path.join(package, "__init__.py")
        if os.path.exists(init) and re.search(rf"\b{part}\b", read(os.path.relpath(init, ROOT))):
            return None
        return f"module {name}: no {os.path.relpath(package, ROOT)}/{part}(.py)"
    return None


def stale_path(path: str):
    """Why a path of the repository (its first part a top-level entry, or a bare .py/.sh/
    .sbatch name) does not exist, else None. Other paths (runs/..., /tmp/...) are examples."""
    path = path.rstrip(".")
    tops, basenames = tracked()
    if "/" in path:
        if path.split("/")[0] not in tops or os.path.exists(os.path.join(ROOT, path)):
            return None
        return f"path {path}: no such file or directory"
    if path not in basenames:
        return f"file {path}: no file of that name in the repository"
    return None


def test_every_repository_path_in_backticks_exists():
    problems = []
    for name in DOCS:
        prose, blocks = split_fences(read(name))
        texts = [m.group(2) for m in INLINE_CODE.finditer("\n".join(prose))]
        texts += [
            code
            for language, code in blocks  # commands name paths too
            if language in ("bash", "sh", "shell", "python")
        ]
        for text in texts:
            reasons = [stale_module(m) for m in MODULE.findall(text)]
            reasons += [stale_path(p) for p in PATH.findall(text)]
            problems += [f"{name}: {reason}" for reason in reasons if reason]
    problems = sorted(set(problems))
    assert not problems, f"{len(problems)} stale reference(s); fix them all at once:\n" + "\n".join(
        problems
    )


@pytest.mark.parametrize(
    "heading, expected",
    [
        ("Multi-GPU and multi-node", "multi-gpu-and-multi-node"),
        ('What "exactly" means', "what-exactly-means"),
        (
            "W&B, TensorBoard, Hugging Face, configs and logs",
            "wb-tensorboard-hugging-face-configs-and-logs",
        ),
        ("The `mixer` family", "the-mixer-family"),
    ],
)
def test_slugs_are_githubs(heading, expected):
    assert slug(heading) == expected
