"""The sbatch templates under a real (one-host) Slurm: 2 tasks, against one process.

.ci/run sets the cluster up with scripts/ci_slurm_setup.sh; where Slurm is
absent these tests are skipped and say why."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import (
    ROOT,
    TINY,
    TRAINED_WEIGHTS_ATOL,
    env_for_subprocess,
    max_difference,
    run_program,
    weights,
)

EXACT = [
    "--dropout",
    "0",
    "--seed",
    "5",
    "--max-steps",
    "4",
    "--share-val",
    "0.09",
    "--target-cols",
    "hisco_1",
    "hisco_2",
    *TINY,
]


def slurm_running() -> bool:
    if shutil.which("sbatch") is None:
        return False
    proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    return proc.returncode == 0 and "idle" in proc.stdout


pytestmark = pytest.mark.skipif(
    not slurm_running(),
    reason="no Slurm cluster here: run scripts/ci_slurm_setup.sh (as root) to start a one-host one",
)


def sbatch(template: str, out_file, *args, sbatch_args=(), env=None):
    proc = subprocess.run(
        [
            "sbatch",
            "--wait",
            f"--output={out_file}",
            *sbatch_args,
            os.path.join(ROOT, "scripts", template),
            *map(str, args),
        ],
        cwd=ROOT,
        env=env or env_for_subprocess(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = open(out_file).read() if os.path.exists(out_file) else ""
    assert proc.returncode == 0, proc.stdout + proc.stderr + output
    return output


@pytest.mark.floats
def test_srun_tasks_template_matches_one_process(small_csv, tmp_path):
    single = tmp_path / "single"
    run_program(
        "finetune.py", "--dataset", small_csv, "--save-path", single, "--batch-size", 8, *EXACT
    )
    out = tmp_path / "slurm"
    log = sbatch(
        "slurm_srun_tasks.sbatch",
        tmp_path / "job.out",
        "--dataset",
        small_csv,
        "--save-path",
        out,
        "--batch-size",
        4,
        *EXACT,
        sbatch_args=["--ntasks=2"],
    )
    assert "world size 2 (1 node(s) x 2 process(es)), backend gloo, launcher slurm" in log
    assert max_difference(weights(single), weights(out)) < TRAINED_WEIGHTS_ATOL


def test_multi_node_template_runs_torchrun_per_node(small_csv, tmp_path):
    env = env_for_subprocess()
    env["GPUS_PER_NODE"] = "2"  # processes per node; no GPUs here
    out = tmp_path / "run"
    log = sbatch(
        "slurm_multi_node.sbatch",
        tmp_path / "job.out",
        "--dataset",
        small_csv,
        "--save-path",
        out,
        "--batch-size",
        4,
        *EXACT,
        sbatch_args=["--nodes=1", "--gpus-per-node=0", "--cpus-per-task=2"],
        env=env,
    )
    assert "world size 2 (1 node(s) x 2 process(es)), backend gloo, launcher torchrun" in log
    assert os.path.exists(out / "model.safetensors")


def test_plain_python_in_a_batch_script_of_several_tasks_is_one_process(small_csv, tmp_path):
    """The batch step sees SLURM_PROCID=0 and SLURM_NTASKS=2 but was not started by srun:
    it must train alone, not wait for peers or ask for MASTER_ADDR."""
    script = tmp_path / "plain.sbatch"
    script.write_text(f'#!/bin/bash\nset -e\ncd {ROOT}\npython finetune.py "$@"\n')
    out = tmp_path / "run"
    log = sbatch(
        str(script),
        tmp_path / "job.out",
        "--dataset",
        small_csv,
        "--save-path",
        out,
        "--batch-size",
        8,
        *EXACT,
        sbatch_args=["--ntasks=2", "--cpus-per-task=1"],
    )
    assert "world size 1 (1 node(s) x 1 process(es)), backend none" in log
    assert os.path.exists(out / "model.safetensors")
