"""benchmarks/full_count.py beside OccCANINE (issue 43): what it refuses before its long runs,
and how it compares the two tools' codes. OccCANINE itself runs in a scratch environment
outside the project (the script's docstring says how to make one), so its run is not here."""

from __future__ import annotations

import importlib.util
import os
import stat
import sys

import pytest

from conftest import ROOT


def full_count():
    spec = importlib.util.spec_from_file_location(
        "full_count", os.path.join(ROOT, "benchmarks", "full_count.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_interpreter_without_occcanine_is_refused_before_anything_is_made(tmp_path):
    bench = full_count()
    python = tmp_path / "python"  # this project's python, with histocc blocked: as if not installed
    python.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -c "import sys; sys.modules[\'histocc\'] = None; '
        f'exec(sys.argv[1])" "$2"\n'
    )
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    kept = tmp_path / "kept"
    with pytest.raises(
        SystemExit,
        match=f"--occcanine {python}: it cannot import OccCANINE's package histocc "
        r"\(ModuleNotFoundError: .*histocc.*\); this script's docstring says how",
    ):
        bench.main(["--rows", "50", "--keep", str(kept), "--occcanine", str(python)])
    assert not kept.exists()
    with pytest.raises(SystemExit, match="cannot run it"):
        bench.main(["--rows", "50", "--occcanine", str(tmp_path / "no-such-python")])


def test_codes_compare_as_both_tools_spell_them():
    """OccCANINE zero-fills every code of its key, the special ones too ('-1' -> '-0001')."""
    bench = full_count()
    theirs, ours = ["-0001", "-0003", "06110", "61110", ""], ["-1", "-3", "06110", "61110", ""]
    assert [bench.comparable(c) for c in theirs] == [bench.comparable(c) for c in ours]
    assert bench.comparable("-0001") != bench.comparable("-0002")


def test_the_per_row_figures_stand_beside_pyarrow_s_limit_and_a_gzip_d_copy(
    tiny_two_code_run, capsys
):
    """The benchmark's per-row part: the distinct rows alone, pyarrow's limit, the gzip'd copy
    (its output the plain file's bytes) and an estimate, in lines gpu_smoke.py reads."""
    bench = full_count()
    bench.main(
        ["--rows", "3000", "--chunk-size", "1000", "--checkpoint", tiny_two_code_run]
        + ["--estimate", "132000000", "2000000"]
    )
    printed = capsys.readouterr().out
    assert "pyarrow's limit for the same rows: read" in printed
    assert "output byte-identical: yes" in printed
    spec = importlib.util.spec_from_file_location(
        "gpu_smoke", os.path.join(ROOT, "benchmarks", "gpu_smoke.py")
    )
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    figures = smoke.full_count_figures(printed)
    # read off, whatever their sign: on 3,000 rows the time beyond the model is the noise of
    # two processes' starts, which may be below zero
    assert isinstance(figures["beyond_model_over_arrow_limit"], float)
    assert isinstance(figures["estimate_132M_rows_min"], float)
    assert figures["computed"] == figures["distinct"]
