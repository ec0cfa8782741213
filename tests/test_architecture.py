"""The package's folders are its layers (docs/architecture.md): every import of mixer
names a module and a name that exist, no module imports from a layer above its own (nor, in
mixer/data/, from a folder above its own), and the folder table names every module.

Read from the source with ast, nothing imported: the imports inside functions (most of
mixer's heavy ones are) are checked as strictly as those at the top of a file.
"""

from __future__ import annotations

import ast
import os
import re
from functools import lru_cache

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Bottom to top, the same order as docs/architecture.md. A module may import its own
# folder and any folder on a lower line; folders on one line are siblings and may not
# import each other. "mixer" is the package root: __init__ (mixer.load, mixer.finetune)
# and the modules kept at the names the README gives (mixer.errors, mixer.plot, ...).
LAYERS = [
    ("core",),
    ("distributed",),
    ("data",),
    ("models",),
    ("reporting",),
    (
        "audit",
    ),  # a feature: the layers below it know it only by the guards passed down (mixer.data.tables.guards)
    (
        "coding",
    ),  # a feature: coding at a stated accuracy, with its statistics; it reads the audit's files
    ("training", "prediction"),
    ("cli",),
    ("mixer",),
]
RANK = {folder: rank for rank, folders in enumerate(LAYERS) for folder in folders}
# mixer/data/ keeps its modules in folders by concept, bottom to top as in
# docs/architecture.md: a module of data/ imports its own folder and the folders before
# it here, never one after (files in and out, codes and labels, a run's prepared data,
# what the model reads).
DATA_FOLDERS = ["tables", "labels", "prepared", "inputs"]
# The version string lives in the leaf mixer/version.py (pyproject reads it there); any
# layer may read it.
ANYWHERE = {("mixer.version", "__version__")}

CODE_IN_STRING = re.compile(
    r"(?:^|[;\s(])(from\s+(mixer(?:\.\w+)*)\s+import\s+([\w ,]+)"
    r"|import\s+(mixer(?:\.\w+)*))"
)
MODULE_STRING = re.compile(r"mixer(?:\.\w+)+")


def python_files(folder: str, recursive: bool = True) -> list:
    found = []
    for path, dirs, files in os.walk(os.path.join(ROOT, folder)):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
        found += [os.path.join(path, f) for f in sorted(files) if f.endswith(".py")]
        if not recursive:
            break
    return found


def checked_files() -> list:
    """mixer/, the programs at the repository root, benchmarks/, tests/, scripts/."""
    return (
        python_files("mixer")
        + python_files("", recursive=False)
        + python_files("benchmarks")
        + python_files("tests")
        + python_files("scripts")
    )


def module_file(module: str):
    """The file of a dotted module name under ROOT, or None."""
    base = os.path.join(ROOT, *module.split("."))
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return None


@lru_cache(maxsize=None)
def top_level_names(path: str) -> frozenset:
    """Names a module defines at its top level (in if/try blocks too)."""
    names = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                visit(getattr(node, "finalbody", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    with open(path, encoding="utf-8") as f:
        visit(ast.parse(f.read()).body)
    return frozenset(names)


def mixer_imports(path: str) -> list:
    """(line, module, names) of every import of mixer in a file: statements at any depth,
    and code in string constants (programs run with `python -c`, subprocess scripts).
    names is () for `import mixer.x`."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found = []
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)  # examples for readers, not code
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0:  # relative: made absolute
            package = module_of(path).split(".")
            if not path.endswith("__init__.py"):
                package = package[:-1]
            base = package[: len(package) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
            if module.split(".")[0] == "mixer":
                found.append((node.lineno, module, tuple(a.name for a in node.names)))
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[0] == "mixer"
        ):
            found.append((node.lineno, node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Call) and dynamic_import(node):
            target = node.args[0] if node.args else None
            if (
                isinstance(target, ast.Constant)
                and isinstance(target.value, str)
                and target.value.split(".")[0] == "mixer"
            ):
                found.append((node.lineno, target.value, ()))
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, a.name, ()) for a in node.names if a.name.split(".")[0] == "mixer"
            ]
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "mixer" in node.value
            and id(node) not in docstrings
        ):
            for match in CODE_IN_STRING.finditer(node.value):
                if match.group(2):
                    names = tuple(
                        n.strip().split(" as ")[0] for n in match.group(3).split(",") if n.strip()
                    )
                    found.append((node.lineno, match.group(2), names))
                else:
                    found.append((node.lineno, match.group(4), ()))
    return found


def dynamic_import(node: ast.Call) -> bool:
    """importlib.import_module(...) or __import__(...)."""
    func = node.func
    return (isinstance(func, ast.Name) and func.id in ("__import__", "import_module")) or (
        isinstance(func, ast.Attribute) and func.attr == "import_module"
    )


def test_imports_by_name_are_literal():
    """A module name built at run time cannot be checked for its layer: mixer has none."""
    problems = []
    for path in python_files("mixer"):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and dynamic_import(node):
                target = node.args[0] if node.args else None
                if not (isinstance(target, ast.Constant) and isinstance(target.value, str)):
                    problems.append(
                        f"{os.path.relpath(path, ROOT)}:{node.lineno}: a module "
                        "imported by a name built at run time"
                    )
    assert not problems, "\n".join(problems)


def module_strings(path: str) -> list:
    """(line, text) of string constants that are nothing but a dotted mixer name
    (sys.modules keys, `python -m` targets)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and MODULE_STRING.fullmatch(node.value)
    ]


def layer_of(module: str) -> str:
    """The layer of a dotted module (or package) name: its folder under mixer/, or
    "mixer" for the package root and the modules directly in it."""
    parts = module.split(".")
    if len(parts) >= 2 and os.path.isdir(os.path.join(ROOT, "mixer", parts[1])):
        return parts[1]
    return "mixer"


def module_of(path: str) -> str:
    rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def unresolved(module: str, names: tuple) -> list:
    target = module_file(module)
    if target is None:
        return [f"no module {module}"]
    missing = []
    for name in names:
        if name == "*" or name in top_level_names(target):
            continue
        if target.endswith("__init__.py") and module_file(f"{module}.{name}"):
            continue  # a sub-module
        missing.append(f"{module} has no {name}")
    return missing


def test_every_import_of_mixer_names_a_module_and_a_name_that_exist():
    problems = []
    for path in checked_files():
        rel = os.path.relpath(path, ROOT)
        for line, module, names in mixer_imports(path):
            problems += [f"{rel}:{line}: {why}" for why in unresolved(module, names)]
        for line, text in module_strings(path):
            parts = text.split(".")
            if not (module_file(text) or unresolved(".".join(parts[:-1]), (parts[-1],)) == []):
                problems.append(f"{rel}:{line}: {text!r} names no module of mixer")
    assert not problems, "\n".join(problems)


def test_the_project_checks_some_imports_here():
    """The walk above finds imports in every place it claims to (a typo in a folder name
    would make it pass on nothing)."""
    counts = {}
    for path in checked_files():
        top = os.path.relpath(path, ROOT).split(os.sep)[0]
        top = top if top in ("mixer", "tests", "benchmarks") else "root"
        counts[top] = counts.get(top, 0) + len(mixer_imports(path))
    assert counts.get("mixer", 0) > 200 and counts.get("tests", 0) > 100, counts
    assert counts.get("benchmarks", 0) > 10 and counts.get("root", 0) >= 4, counts


def imported_layers(module: str, names: tuple) -> set:
    """The layers an import reaches: `from mixer import x` reaches the folder x when x is
    one, else the package root."""
    if names and all((module, n) in ANYWHERE for n in names):
        return set()
    if module != "mixer":
        return {layer_of(module)}
    if not names:  # `import mixer`: the package root, whatever is used of it
        return {"mixer"}
    return {
        layer_of(f"mixer.{n}") if module_file(f"mixer.{n}") else "mixer"
        for n in names
        if (module, n) not in ANYWHERE
    }


def test_no_module_imports_from_a_layer_above_its_own():
    folders = {
        d
        for d in os.listdir(os.path.join(ROOT, "mixer"))
        if os.path.isfile(os.path.join(ROOT, "mixer", d, "__init__.py"))
    }
    assert set(RANK) == folders | {"mixer"}, "every folder of mixer/ has its place in LAYERS"
    problems = []
    for path in python_files("mixer"):
        importer = module_of(path)
        own = layer_of(importer)
        for line, module, names in mixer_imports(path):
            for layer in imported_layers(module, names) - {own}:
                if RANK[layer] >= RANK[own]:
                    side = "a sibling" if RANK[layer] == RANK[own] else "a layer above"
                    problems.append(
                        f"{os.path.relpath(path, ROOT)}:{line}: {importer} ({own}) "
                        f"imports {module} ({layer}), {side}"
                    )
    assert not problems, "\n".join(problems)


def test_no_module_below_the_root_reads_the_package_root():
    """A name read from the package root (`from mixer import __version__`) runs
    mixer/__init__.py, the top layer, from below it: the version is read from its leaf
    module, mixer.version, and nothing else of the root is read by a folder of mixer/."""
    problems = []
    for path in python_files("mixer"):
        if layer_of(module_of(path)) == "mixer":
            continue
        for line, module, names in mixer_imports(path):
            if module == "mixer" and any(not module_file(f"mixer.{n}") for n in names):
                problems.append(f"{os.path.relpath(path, ROOT)}:{line}: from mixer import {names}")
    assert not problems, "\n".join(problems)


WIRING = """
import sys
import mixer
loaded = sorted(m for m in sys.modules if m == "mixer" or m.startswith("mixer."))
heavy = sorted(m for m in ("numpy", "pandas", "torch", "transformers") if m in sys.modules)
from mixer.core import options
from mixer.data.tables import guards, sinks
left = [
    f"{module.__name__}.{name}"
    for module, names in (
        (sinks, ("_SINKS", "register", "registered")),
        (guards, ("_OUTPUTS", "_TRAINING_TABLES", "_EXTRA_TRAIN", "protect_outputs")),
        (options, ("_FLAG_CHECKS", "register_flag_checks", "flag_checks")),
    )
    for name in names
    if hasattr(module, name)
]
print(loaded, heavy, left, sep="\\n")
"""


def test_import_mixer_runs_no_wiring():
    """`import mixer` wires nothing into the layers below: it loads the package root, its
    version and its errors alone (no feature, no sink, no check), no numpy, pandas or torch,
    and the registries it used to fill (the prediction sinks, the audit's guards, the flags'
    checks) do not exist: each is built or passed where it is used."""
    import subprocess
    import sys

    from conftest import env_for_subprocess

    done = subprocess.run(
        [sys.executable, "-c", WIRING],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env_for_subprocess(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    loaded, heavy, left = done.stdout.splitlines()
    assert loaded == str(
        ["mixer", "mixer.core", "mixer.core.errors", "mixer.errors", "mixer.version"]
    )
    assert heavy == "[]" and left == "[]"


def test_the_package_root_calls_nothing_at_import():
    """mixer/__init__.py holds imports, definitions and names, no call: a registration there
    (`register()`) would run at every import of mixer."""
    with open(os.path.join(ROOT, "mixer", "__init__.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    calls = [
        node.lineno
        for statement in tree.body
        if not isinstance(statement, (ast.FunctionDef, ast.ClassDef))
        for node in ast.walk(statement)
        if isinstance(node, ast.Call)
    ]
    assert not calls, f"mixer/__init__.py calls at import, lines {calls}"


def data_folder_of(module: str, names: tuple = ()) -> set:
    """The folders of mixer/data/ an import reaches ("tables", ...): `from mixer.data import
    tables` reaches the folder it names; an import outside data/'s folders reaches none."""
    parts = module.split(".")
    if parts == ["mixer", "data"]:
        return set().union(*(data_folder_of(f"mixer.data.{n}") for n in names)) if names else set()
    if parts[:2] == ["mixer", "data"] and os.path.isdir(
        os.path.join(ROOT, "mixer", "data", parts[2])
    ):
        return {parts[2]}
    return set()


def test_no_module_of_data_imports_from_a_folder_above_its_own():
    """Inside mixer/data/ the folders are layers too (DATA_FOLDERS): tables knows nothing of
    labels, labels nothing of a run's prepared data, and the model's inputs come last."""
    data = os.path.join(ROOT, "mixer", "data")
    folders = {d for d in os.listdir(data) if os.path.isfile(os.path.join(data, d, "__init__.py"))}
    assert set(DATA_FOLDERS) == folders, "every folder of mixer/data/ has its place in DATA_FOLDERS"
    loose = sorted(f for f in os.listdir(data) if f.endswith(".py") and f != "__init__.py")
    assert not loose, f"modules of mixer/data/ outside its folders: {loose}"
    rank = {folder: i for i, folder in enumerate(DATA_FOLDERS)}
    problems = []
    for path in python_files(os.path.join("mixer", "data")):
        importer = module_of(path)
        (own,) = data_folder_of(importer) or {None}
        for line, module, names in mixer_imports(path):
            for folder in data_folder_of(module, names) - {own}:
                if own is None or rank[folder] > rank[own]:
                    problems.append(
                        f"{os.path.relpath(path, ROOT)}:{line}: {importer} ({own}) imports "
                        f"{module} ({folder}), a folder of data/ above its own"
                    )
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------ the folder table
FOLDER_ROW = re.compile(r"^\| `(mixer/(?:\w+/)*)` \| (.*) \| (.*) \|$")


def folder_table(text: str) -> dict:
    """{folder: the names written in backticks in its row's modules column}: the folder
    table of docs/architecture.md."""
    rows = [FOLDER_ROW.match(line) for line in text.splitlines()]
    return {row.group(1): set(re.findall(r"`([\w/]+)`", row.group(2))) for row in rows if row}


def table_problems(table: dict) -> list:
    """Each module of mixer/ the table does not name in its folder's row (a sub-folder
    without a row of its own: its name and its modules in its parent's row), and each row
    whose folder is gone."""
    problems = [
        f"{folder}: a row of the folder table, but no such folder"
        for folder in sorted(table)
        if not os.path.isdir(os.path.join(ROOT, folder))
    ]
    for path in python_files("mixer"):
        rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
        folder, name = rel.rsplit("/", 1)
        if name == "__init__.py":
            continue
        row, within = folder + "/", []
        while row not in table and row.count("/") > 1:
            parent = row[: row.rstrip("/").rfind("/") + 1]
            within.insert(0, row[len(parent) :])
            row = parent
        missing = [f"`{n}`" for n in within + [name[:-3]] if n not in table.get(row, ())]
        if missing:
            problems.append(
                f"{rel}: the row of {row} in the folder table lacks {', '.join(missing)}"
            )
    return problems


def architecture_text() -> str:
    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as f:
        return f.read()


def test_the_folder_table_names_every_module():
    """docs/architecture.md's folder table is where a reader looks a module up: a module
    it does not name (a new one, or one moved) fails here, as does a row of a folder gone."""
    table = folder_table(architecture_text())
    assert len(table) >= 14 and "mixer/" in table, sorted(table)  # the table is read
    problems = table_problems(table)
    assert not problems, "docs/architecture.md:\n" + "\n".join(problems)


def test_the_folder_table_check_finds_a_module_left_out():
    """The check bites: the table without one module's name, or without a sub-folder's,
    is refused, naming the module."""
    text = architecture_text()
    assert table_problems(
        folder_table(text.replace("`reading` (every table", "reading (every table"))
    ) == [
        "mixer/data/tables/reading.py: the row of mixer/data/tables/ in the folder table lacks `reading`"
    ]
    no_best = folder_table(text.replace("`best/` (the best model", "best (the best model"))
    assert [p.split(":")[0] for p in table_problems(no_best)] == [
        "mixer/training/best/hook.py",
        "mixer/training/best/keeper.py",
    ]


@pytest.mark.parametrize(
    "script", ["mixer-finetune", "mixer-train", "mixer-predict", "mixer-evaluate"]
)
def test_console_scripts_name_functions_that_exist(script):
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        target = re.search(rf'^{script} = "([\w.]+):(\w+)"', f.read(), re.M)
    assert target, f"{script} in pyproject.toml"
    assert unresolved(target.group(1), (target.group(2),)) == []


# ------------------------------------------------------------------ one way in for every table
# The calls of pandas, pyarrow and openpyxl that read a table from a file, by name.
TABLE_READERS = {
    "read_csv",
    "read_table",
    "read_parquet",
    "read_excel",
    "read_stata",
    "read_json",
    "read_feather",
    "read_fwf",
    "read_sas",
    "read_spss",
    "read_orc",
    "open_csv",
    "ParquetFile",
    "read_schema",
    "load_workbook",
    "StataReader",
    "ExcelFile",
    "dataset",
}
READING_MODULES = {
    "mixer/data/tables/reading.py",
    "mixer/data/tables/formats.py",
}  # the reader and its formats
# Files that are not tables a user gives: the tool's own, read where they are written.
OWN_FILES = {
    ("mixer/data/prepared/files.py", "read_key"): "a run's key.csv, written by write_prepared",
    (
        "mixer/data/prepared/files.py",
        "load_prepared",
    ): "a run's prepared splits, written by write_prepared",
    (
        "mixer/data/prepared/files.py",
        "read_split",
    ): "columns of a run's prepared split, written by write_prepared",
    (
        "mixer/data/prepared/files.py",
        "iter_split",
    ): "a run's prepared split in batches of rows, written by write_prepared",
    (
        "mixer/coding/scores.py",
        "read_summary",
    ): "a model directory's production_curve.csv, written by coding_files",
    ("mixer/data/inputs/token_cache.py", "row_groups"): "a run's prepared split: its row groups",
    (
        "mixer/data/inputs/token_cache.py",
        "build_part",
    ): "a run's prepared split, tokenised by row group",
    ("mixer/data/inputs/training_inputs.py", "build_text_store"): "a run's prepared split's texts",
    ("mixer/reporting/plot.py", "plot_training_curves"): "a run's logs.csv, written by the tracker",
    (
        "mixer/models/occcanine.py",
        "_read_checkpoint",
    ): "OccCANINE's key.csv beside its own checkpoint",
    (
        "mixer/reporting/card.py",
        "_by_language",
    ): "a run's evaluation table, carried as text to its card",
    (
        "mixer/coding/target.py",
        "read_scores",
    ): "a run's scores.parquet, written by its final evaluation",
}


def table_reads(path: str) -> list:
    """(function, line) of each call in a file that reads a table with pandas, pyarrow or
    openpyxl: module.reader(...) or a reader imported by name from those packages."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    imported = {
        a.asname or a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").split(".")[0] in ("pandas", "pyarrow", "openpyxl")
        for a in node.names
        if a.name in TABLE_READERS
    }
    reads = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            inner = (
                child.name
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                else function
            )
            if isinstance(child, ast.Call):
                func = child.func
                if (
                    isinstance(func, ast.Attribute)
                    and func.attr in TABLE_READERS
                    and not (
                        isinstance(func.value, ast.Name) and func.value.id in ("reading", "self")
                    )
                ) or (isinstance(func, ast.Name) and func.id in imported):
                    reads.append((function, child.lineno))
            visit(child, inner)

    visit(tree, "<module>")
    return reads


def test_every_table_is_read_by_the_one_reader():
    """Every file a user gives (--dataset, --train-data, --val-data, --extra-train, --key,
    --code-descriptions, --input, --predictions, ...) comes in through mixer.data.tables.reading,
    with its role's options; a new path that reads a table itself fails here. The tool's
    own files (a run's key.csv and prepared splits, its logs) are listed, each with why."""
    found = {}
    for path in python_files("mixer"):
        rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
        if rel in READING_MODULES:
            continue
        for function, line in table_reads(path):
            found.setdefault((rel, function), []).append(line)
    bypass = {
        f"{rel}:{lines[0]} ({function})"
        for (rel, function), lines in found.items()
        if (rel, function) not in OWN_FILES
    }
    assert not bypass, f"tables read outside mixer.data.tables.reading: {sorted(bypass)}"
    assert set(found) == set(OWN_FILES), f"stale entries: {sorted(set(OWN_FILES) - set(found))}"
    assert (
        len(table_reads(os.path.join(ROOT, "mixer", "data", "tables", "reading.py"))) >= 4
    )  # it sees reads


# ------------------------------------------------------------------ the tests' own layering
def names_of_test_files() -> set:
    return {
        os.path.basename(path)[:-3]
        for path in python_files("tests")
        if os.path.basename(path).startswith("test_")
    }


def imported_test_modules(source: str, names: set) -> list:
    """(line, module) of each import of a test file in `source`, at any depth: `import
    test_x`, `from test_x import ...`, `from tests.test_x import ...`, `from . import test_x`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            dotted = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            dotted = [node.module or ""] + [
                f"{node.module or ''}.{alias.name}" for alias in node.names
            ]
        else:
            continue
        matched = [name.strip(".") for name in dotted if set(name.split(".")) & names]
        found += [(node.lineno, matched[0])] if matched else []
    return found


def test_no_test_file_imports_another():
    """Shared fixtures and helpers live in tests/conftest.py (the OccCANINE reference model in
    tests/occcanine_reference.py): a test file that imports another runs that file's module
    code, shares its fixtures by import and ties two components' tests together."""
    names = names_of_test_files()
    found = [
        f"{os.path.relpath(path, ROOT)}:{line} imports {module}"
        for path in python_files("tests")
        for line, module in imported_test_modules(open(path, encoding="utf-8").read(), names)
    ]
    assert not found, "move what is shared into tests/conftest.py:\n" + "\n".join(found)
    assert (
        "test_distributed" in names
        and len(
            imported_test_modules(  # it sees such imports
                "import test_distributed\nfrom test_distributed import run\nfrom tests.test_distributed import run\n"
                "from . import test_distributed\ndef f():\n    from test_distributed import run\n",
                names,
            )
        )
        == 5
    )


def model_private_names() -> set:
    """The private attributes and methods of the API's Model (mixer/prediction/api.py)."""
    with open(os.path.join(ROOT, "mixer", "prediction", "api.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    names = {n.name for n in model.body if isinstance(n, ast.FunctionDef)}
    names |= {
        node.attr
        for node in ast.walk(model)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    }
    return {n for n in names if n.startswith("_") and not n.endswith("__")}


def is_model(node) -> bool:
    """An expression that names a Model: `model`, `job.model`."""
    return (isinstance(node, ast.Name) and node.id == "model") or (
        isinstance(node, ast.Attribute) and node.attr == "model"
    )


def private_reads(source: str, private: set) -> list:
    """(line, name) of each use of one of `private` on anything but self, or by its name in
    hasattr/getattr/setattr; and of any private name a module writes onto a Model (a cache
    of its own kept there)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and not (
            isinstance(node.value, ast.Name) and node.value.id == "self"
        ):
            written = isinstance(node.ctx, ast.Store) and is_model(node.value)
            if node.attr in private or (written and node.attr.startswith("_")):
                found.append((node.lineno, node.attr))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("hasattr", "getattr", "setattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and (
                node.args[1].value in private
                or (is_model(node.args[0]) and str(node.args[1].value).startswith("_"))
            )
        ):
            found.append((node.lineno, node.args[1].value))
    return found


def test_nothing_outside_the_api_reads_the_model_s_private_attributes():
    """The Model's interface to the rest of mixer is its public names (predictor,
    read_inputs, reading_keys, context_fit, code_table, ...): no other module reads or
    writes what it keeps to itself, nor keeps its own caches on it."""
    private = model_private_names()
    assert {"_predictor", "_noted"} <= private
    api = os.path.join(ROOT, "mixer", "prediction", "api.py")
    torch_models = os.path.join(ROOT, "mixer", "models")  # there a `model` is a torch module
    found = [
        f"{os.path.relpath(path, ROOT)}:{line}: {name}"
        for path in python_files("mixer")
        if os.path.abspath(path) != api and not os.path.abspath(path).startswith(torch_models)
        for line, name in private_reads(open(path, encoding="utf-8").read(), private)
    ]
    assert not found, "use the Model's public names:\n" + "\n".join(found)
    planted = (
        "x = model._predictor\nmodel._noted = 1\nhasattr(m, '_noted')\nself._predictor\n"
        "job.model._cache = 2\nhasattr(model, '_cache')\ny = model._other\n"
    )
    assert [name for _, name in private_reads(planted, private)] == [
        "_predictor",
        "_noted",
        "_noted",
        "_cache",
        "_cache",
    ]
