"""Real launches on CPU (gloo): torchrun with 2 processes, two "nodes" on
127.0.0.1, the legacy launcher, Slurm variables; each compared with one process."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from conftest import (
    ROOT,
    TINY,
    TRAINED_METRICS_ATOL,
    TRAINED_WEIGHTS_ATOL,
    assert_floats_close,
    assert_same_metrics,
    assert_same_predictions,
    children,
    env_for_subprocess,
    max_difference,
    rank0_gathers_cmd,
    run,
    run_program,
    torchrun_cmd,
    weights,
)

# Short, with the default recipe: dropout 0.1 (keyed by the row, mixer.models.keyed_dropout),
# a fixed seed, 6 optimizer steps. Training noise (spelling edits, and language "en" -> "unk")
# stays on, as by default: every comparison below also proves that N processes, a resume and
# another layout draw the same dropout masks and the same noise as one process.
EXACT = [
    "--seed",
    "5",
    "--max-steps",
    "6",
    "--eval-interval",
    "3",
    "--share-val",
    "0.09",
    "--target-cols",
    "hisco_1",
    "hisco_2",
    "--language",
    "en",
    *TINY,
]


def free_port() -> int:
    """For the launches that need a port known beforehand: two "nodes", and ranks started
    without torchrun (Slurm's variables). Everything on one node uses --standalone."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def single(tmp_path_factory, small_csv):
    """One process, batch 8: the reference."""
    out = str(tmp_path_factory.mktemp("single") / "run")
    run_program(
        "finetune.py", "--dataset", small_csv, "--save-path", out, "--batch-size", 8, *EXACT
    )
    return out


@pytest.fixture(scope="module")
def two_procs(tmp_path_factory, small_csv):
    """torchrun, one node, 2 processes of batch 4, with all-gathers refused (rank 0 gathers)."""
    out = str(tmp_path_factory.mktemp("ddp") / "run")
    proc = run(
        rank0_gathers_cmd(2, "finetune.py")
        + ["--distributed", "--dataset", small_csv, "--save-path", out, "--batch-size", "4", *EXACT]
    )
    return out, proc


@pytest.mark.floats
def test_two_processes_learn_what_one_process_learns(single, two_procs):
    out, _ = two_procs
    assert max_difference(weights(single), weights(out)) < TRAINED_WEIGHTS_ATOL
    assert_same_metrics(single, out)
    tables = [pd.read_csv(os.path.join(d, "evaluation.csv")) for d in (single, out)]
    assert tables[0]["n"].max() == 11  # every validation row, gathered to rank 0
    pd.testing.assert_frame_equal(tables[0], tables[1], atol=1e-6)


def test_one_and_two_processes_write_the_same_ngram_head(single, two_procs):
    """The n-gram head (mixer.models.ngram) reads the same rows on every rank and its weight
    is chosen on flat logits each rank computes alone on the same batches: one file."""
    out, _ = two_procs
    files = [open(os.path.join(d, "ngram.npz"), "rb").read() for d in (single, out)]
    assert files[0] == files[1]


@pytest.mark.floats
def test_accumulation_learns_what_one_batch_learns(single, small_csv, tmp_path):
    """Batch 4 x 2 accumulation steps, with the default dropout: the rows of a step meet
    their own masks in another micro-batch (mixer.models.keyed_dropout)."""
    out = str(tmp_path / "run")
    run_program(
        "finetune.py",
        "--dataset",
        small_csv,
        "--save-path",
        out,
        "--batch-size",
        4,
        "--grad-accum-steps",
        2,
        *EXACT,
    )
    assert max_difference(weights(single), weights(out)) < TRAINED_WEIGHTS_ATOL
    assert_same_metrics(single, out)


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A word-piece encoder (BERT layout, random weights, the quickstart's tokeniser): its
    batches are padded to their longest row, so --length-groups applies (CANINE's are not)."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from mixer.models.encoders import package_model_dir

    out = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = AutoTokenizer.from_pretrained(package_model_dir("minilm-l6"))
    torch.manual_seed(0)
    BertModel(
        BertConfig(
            vocab_size=tokenizer.vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
        )
    ).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


@pytest.mark.floats
def test_length_groups_change_only_rounding_also_across_processes(tiny_bert, small_csv, tmp_path):
    """Noised rows cut into groups of similar length: one process with whole batches, one
    with 3 groups per batch and 2 processes with 3 groups each end with the same weights."""
    common = ["--dataset", small_csv, *EXACT, "--encoder", tiny_bert, "--max-len", "64"]
    whole = run_program(
        "finetune.py",
        *common,
        "--save-path",
        tmp_path / "whole",
        "--batch-size",
        8,
        "--length-groups",
        1,
    )
    grouped = run_program(
        "finetune.py",
        *common,
        "--save-path",
        tmp_path / "grouped",
        "--batch-size",
        8,
        "--length-groups",
        3,
    )
    two = run(
        torchrun_cmd(2, "--standalone")
        + [
            os.path.join(ROOT, "finetune.py"),
            "--distributed",
            *map(str, common),
            "--save-path",
            str(tmp_path / "two"),
            "--batch-size",
            "4",
            "--length-groups",
            "3",
        ]
    )
    assert "micro-batches padded whole (--length-groups 1)" in whole.stdout + whole.stderr
    keeps = subprocess.run(
        [
            sys.executable,
            "-c",
            "from mixer.core.allocator import keep_freed_memory; "
            "print(keep_freed_memory() is not None)",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env_for_subprocess(),
        check=True,
    ).stdout.split() == ["True"]
    assert ("C allocator keeps freed memory for reuse" in whole.stdout + whole.stderr) == keeps
    assert "cut into at most 3 groups of similar length" in grouped.stdout + grouped.stderr
    assert "cut into at most 3 groups of similar length" in two.stdout + two.stderr
    reference = weights(tmp_path / "whole")
    assert max_difference(reference, weights(tmp_path / "grouped")) < TRAINED_WEIGHTS_ATOL
    assert max_difference(reference, weights(tmp_path / "two")) < TRAINED_WEIGHTS_ATOL
    assert_same_metrics(str(tmp_path / "whole"), str(tmp_path / "grouped"))
    # DDP's static graph takes one backward pass per step: its runs are padded whole
    static = run(
        torchrun_cmd(2, "--standalone")
        + [
            os.path.join(ROOT, "finetune.py"),
            "--distributed",
            *map(str, common),
            "--save-path",
            str(tmp_path / "static"),
            "--batch-size",
            "4",
            "--static-graph",
        ]
    )
    assert "micro-batches padded whole (--length-groups 1)" in static.stdout + static.stderr
    assert max_difference(reference, weights(tmp_path / "static")) < TRAINED_WEIGHTS_ATOL


def test_two_processes_learn_with_context_what_one_process_learns(tiny_bert, small_csv, tmp_path):
    """Context columns on a word-piece encoder, with training noise: the context is cut from
    its end in tokens, the token cache built by 2 ranks counts the rows as one process does
    (rank 0 says it once), and 2 processes learn what one learns."""
    frame = pd.read_csv(small_csv, dtype=str, keep_default_na=False)
    frame["relation"] = np.where(
        np.arange(len(frame)) % 3, "wife", "son of the head of the household"
    )
    frame.loc[frame.index[:6], "occ1"] = (
        frame["occ1"][:6] + " and farmer and fisher and smith and weaver"
    )
    data = tmp_path / "households.csv"
    frame.to_csv(data, index=False)
    common = [
        "--dataset",
        str(data),
        *EXACT,
        "--encoder",
        tiny_bert,
        "--max-len",
        "16",
        "--context-cols",
        "relation",
    ]
    one = run_program("finetune.py", *common, "--save-path", tmp_path / "one", "--batch-size", 8)
    two = run(
        torchrun_cmd(2, "--standalone")
        + [
            os.path.join(ROOT, "finetune.py"),
            "--distributed",
            *map(str, common),
            "--save-path",
            str(tmp_path / "two"),
            "--batch-size",
            "4",
        ]
    )
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        tiny_bert
    )  # the rows counted, by transformers' own count
    context = " [SEP] relation: " + frame["relation"]
    longer = [len(tokenizer("en", d.strip())["input_ids"]) > 16 for d in frame["occ1"]]
    cut = [
        len(tokenizer("en", d.strip() + c)["input_ids"]) > 16
        for d, c in zip(frame["occ1"], context)
    ]
    assert 0 < sum(longer) < sum(cut) < len(frame)
    said = [line for line in one.stdout.splitlines() if "the context of" in line]
    assert (
        len(said) == 1
        and (
            f"the context of {sum(cut)} row(s) was cut from its end to fit --max-len 16 "
            f"(tokens); in {sum(longer)} of them the description alone"
        )
        in said[0]
    )
    assert [line for line in two.stdout.splitlines() if "the context of" in line] == said
    assert max_difference(weights(tmp_path / "one"), weights(tmp_path / "two")) < 1e-5
    assert_same_metrics(str(tmp_path / "one"), str(tmp_path / "two"))
    # predict.py counts every rank's rows of every chunk, and rank 0 says it once
    alone = run_program(
        "predict.py",
        "--checkpoint",
        tmp_path / "one",
        "--input",
        data,
        "--output",
        tmp_path / "one.csv",
    )
    shared = run(
        torchrun_cmd(2, "--standalone")
        + [
            os.path.join(ROOT, "predict.py"),
            "--distributed",
            "--checkpoint",
            str(tmp_path / "one"),
            "--input",
            str(data),
            "--output",
            str(tmp_path / "two.csv"),
            "--chunk-size",
            "50",
        ]
    )
    noted = [line for line in alone.stderr.splitlines() if "the context of" in line]
    assert len(noted) == 1 and f"the context of {sum(cut)} row(s)" in noted[0]
    assert [line for line in shared.stderr.splitlines() if "the context of" in line] == noted


def test_noise_is_on_and_changes_what_is_learned(single, small_csv, tmp_path):
    """The equivalence tests run with noise: without it another model comes out."""
    with open(os.path.join(single, "logs.csv")) as handle:
        assert "val_noisy_flat_accuracy" in handle.readline()
    out = str(tmp_path / "run")
    proc = run_program(
        "finetune.py",
        "--dataset",
        small_csv,
        "--save-path",
        out,
        "--batch-size",
        8,
        *EXACT,
        "--no-augmentation",
        "--no-unk-lang",
    )
    assert "no spelling noise" in proc.stdout
    assert max_difference(weights(single), weights(out)) > 1e-4


def test_rank_zero_alone_prints_logs_and_writes(two_procs):
    out, proc = two_procs
    text = proc.stdout + proc.stderr
    assert text.count("spelling noise on 0.3 of the training rows") == 1
    assert text.count("language 'unk' for 0.25 of the draws") == 1
    assert text.count("world size 2 (1 node(s) x 2 process(es)), backend gloo") == 1
    assert text.count("global batch 8") == 1
    assert text.count("eval step 3 ") == 1 and text.count("eval step 6 ") == 1
    assert "devices: rank 0 cpu, rank 1 cpu" in text
    with open(os.path.join(out, "logs.csv")) as handle:
        lines = handle.read().splitlines()
    assert len(lines) == 3 and lines[0].startswith("step,")
    checkpoint = torch.load(os.path.join(out, "last.pt"), weights_only=True)
    assert not any(k.startswith("module.") for k in checkpoint["model"])
    assert not any(k.startswith("module.") for k in weights(out))
    leftovers = [f for f in os.listdir(out) if f.startswith(".tmp")]
    assert leftovers == []


def test_two_nodes_on_localhost_match_one_node(two_procs, small_csv, tmp_path):
    reference, _ = two_procs
    out = str(tmp_path / "run")
    port = free_port()
    procs = []
    for node_rank in (0, 1):
        cmd = torchrun_cmd(
            1,
            "--nnodes=2",
            f"--node_rank={node_rank}",
            "--master_addr=127.0.0.1",
            f"--master_port={port}",
        ) + [
            os.path.join(ROOT, "finetune.py"),
            "--distributed",
            "--dataset",
            small_csv,
            "--save-path",
            out,
            "--batch-size",
            "4",
            *EXACT,
        ]
        procs.append(
            subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=env_for_subprocess(),
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert "world size 2 (2 node(s) x 1 process(es))" in outputs[0]
    assert "world size 2" not in outputs[1]
    assert max_difference(weights(reference), weights(out)) < 1e-6
    assert_same_metrics(reference, out)


@pytest.mark.floats
def test_legacy_launcher_and_automatic_distributed(single, small_csv, tmp_path):
    """torch.distributed.launch passes --local-rank; WORLD_SIZE>1 alone switches DDP on.
    Also the dense path for embedding gradients (--embedding-sync ddp; the
    other tests use the default, rows)."""
    out = str(tmp_path / "run")
    proc = run(
        [
            sys.executable,
            "-m",
            "torch.distributed.launch",
            "--standalone",
            "--nproc_per_node=2",
            os.path.join(ROOT, "finetune.py"),
            "--dataset",
            small_csv,
            "--save-path",
            out,
            "--batch-size",
            "4",
            "--embedding-sync",
            "ddp",
            *EXACT,
        ]
    )
    text = proc.stdout + proc.stderr
    assert "training with --distributed" in text
    assert "launcher torch.distributed.launch" in text
    assert max_difference(weights(single), weights(out)) < TRAINED_WEIGHTS_ATOL


@pytest.mark.floats
def test_slurm_variables_without_torchrun(single, small_csv, tmp_path):
    out = str(tmp_path / "run")
    port = free_port()
    procs = []
    for rank in (0, 1):
        env = env_for_subprocess()
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            env.pop(name, None)
        env.update(
            SLURM_PROCID=str(rank),
            SLURM_NTASKS="2",
            SLURM_LOCALID=str(rank),
            SLURM_JOB_NUM_NODES="1",
            SLURM_STEP_ID="0",
            SLURM_STEP_NUM_TASKS="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        cmd = [
            sys.executable,
            os.path.join(ROOT, "finetune.py"),
            "--distributed",
            "--dataset",
            small_csv,
            "--save-path",
            out,
            "--batch-size",
            "4",
            *EXACT,
        ]
        procs.append(
            subprocess.Popen(
                cmd, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        )
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert "launcher slurm" in outputs[0]
    assert max_difference(weights(single), weights(out)) < TRAINED_WEIGHTS_ATOL


def test_distributed_without_a_launcher_says_how_to_launch(small_csv, tmp_path):
    proc = run_program(
        "finetune.py",
        "--distributed",
        "--dataset",
        small_csv,
        "--save-path",
        tmp_path / "run",
        *EXACT,
        check=False,
    )
    assert proc.returncode == 2
    assert "torchrun --nproc_per_node=N" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.floats
def test_resume_with_a_different_number_of_processes(single, small_csv, tmp_path):
    """2 processes stop at step 3; 1 process with the same global batch finishes."""
    out = str(tmp_path / "run")
    env = env_for_subprocess()  # launched as README shows: the script runs torchrun --standalone
    env["PATH"] = (
        os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    )  # this Python's torchrun
    run(
        [
            "bash",
            os.path.join(ROOT, "scripts", "train_multi_gpu.sh"),
            "2",
            "finetune.py",
            "--dataset",
            small_csv,
            "--save-path",
            out,
            "--batch-size",
            "4",
            "--stop-at-step",
            "3",
            *EXACT,
        ],
        env=env,
    )
    state = torch.load(os.path.join(out, "last.pt"), weights_only=True)
    assert state["progress"]["step"] == 3 and state["progress"]["rows_in_epoch"] == 24
    proc = run_program(
        "finetune.py", "--dataset", small_csv, "--save-path", out, "--batch-size", 8, *EXACT
    )
    assert "resuming from" in proc.stdout and "at step 3" in proc.stdout
    assert max_difference(weights(single), weights(out)) < TRAINED_WEIGHTS_ATOL
    assert_same_metrics(single, out)


def test_a_killed_rank_ends_every_process(small_csv, tmp_path):
    out = str(tmp_path / "run")
    cmd = torchrun_cmd(2, "--standalone") + [
        os.path.join(ROOT, "finetune.py"),
        "--distributed",
        "--dataset",
        small_csv,
        "--save-path",
        out,
        "--target-cols",
        "hisco_1",
        "--batch-size",
        "4",
        "--max-steps",
        "100000",
        "--log-interval",
        "1",
        "--dist-timeout",
        "60",
        *TINY[:-2],
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env_for_subprocess(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    seen = []
    for line in proc.stdout:  # wait until training runs
        seen.append(line)
        if line.startswith("step 3:"):
            break
    workers = [pid for pid in children(proc.pid)]
    assert len(workers) == 2, seen
    os.kill(max(workers), 9)
    rest = proc.communicate(timeout=120)[0]
    assert proc.returncode != 0
    assert all(not os.path.exists(f"/proc/{pid}") or _is_zombie(pid) for pid in workers)
    assert "exitcode  : -9" in rest or "Signal 9" in rest or "SIGKILL" in rest, rest[-2000:]


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_bad_input_under_torchrun_fails_every_rank_once(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("occ1,hisco_1\nfarmer,6110\nfisher,64100\n")
    proc = run(
        torchrun_cmd(2, "--standalone")
        + [
            os.path.join(ROOT, "finetune.py"),
            "--distributed",
            "--dataset",
            str(bad),
            "--save-path",
            str(tmp_path / "run"),
            "--target-cols",
            "hisco_1",
            *TINY,
        ],
        check=False,
    )
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert text.count("row 1 hisco_1='6110'") == 1
    assert not own_frames(text)  # torchrun reports the failed worker; no traceback of ours


def test_a_failed_rank_prints_its_error_before_its_peers_can_learn_of_it(monkeypatch, capsys):
    """torchrun stops every rank once one exits: a peer told of the failure exits at once,
    so the failed rank's message must be out before the store tells anyone."""
    from mixer.core.errors import UserError
    from mixer.distributed import world as mdist

    class Store:  # the rendezvous store; records what stderr held when the outcome was posted
        def __init__(self):
            self.values, self.stderr_then = {}, None

        def set(self, key, value):
            self.stderr_then = capsys.readouterr().err
            self.values[key] = value.encode()

        def check(self, keys):  # the peer (rank 0) has posted too
            return True

        def get(self, key):
            return self.values.get(key, b"ok")

    store = Store()
    monkeypatch.setattr(mdist, "_STORE", [store])
    world = mdist.World(rank=1, world_size=2, backend="gloo")

    def bad_rows():
        raise UserError("row 1 hisco_1='6110': shorter than --block-size 5")

    with pytest.raises(UserError) as raised:
        mdist.all_ranks(bad_rows, world)
    assert (
        store.stderr_then == "[rank 1] error: row 1 hisco_1='6110': shorter than --block-size 5\n"
    )
    from mixer.core.errors import report

    report(raised.value, 1)  # run_main reports it again: printed once
    assert capsys.readouterr().err == ""


def test_own_frames_are_the_project_files_whatever_the_clone_is_called():
    venv = os.path.join(ROOT, ".venv")  # a clone in /somewhere/mixer/ with its .venv inside
    report = (
        f"[rank1]: {venv}/bin/python exited with code 2\n"
        f'  File "{venv}/lib/python3.11/site-packages/torch/distributed/run.py", line 9, in main\n'
    )
    assert own_frames(report) == []
    ours = f'  File "{os.path.join(ROOT, "mixer", "data", "prepared", "prepare.py")}", line 1, in prepare\n'
    program = f'  File "{os.path.join(ROOT, "finetune.py")}", line 1, in <module>\n'
    assert len(own_frames(report + ours + program)) == 2


def own_frames(text: str) -> list:
    """The traceback frames of the project's own files (its package and programs) in a
    program's output: judged by the files' real paths, so that a clone in a directory
    named mixer (whose .venv torchrun names in its report) is no false alarm."""
    root = os.path.realpath(ROOT)
    ours = os.path.join(root, "mixer") + os.sep
    programs = {os.path.join(root, name) for name in os.listdir(root) if name.endswith(".py")}
    frames = [os.path.realpath(path) for path in re.findall(r'File "([^"]+)", line \d+', text)]
    return [path for path in frames if path.startswith(ours) or path in programs]


@pytest.mark.floats
def test_predict_under_torchrun_writes_one_file_in_input_order(single, small_csv, tmp_path):
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    run_program(
        "predict.py",
        "--checkpoint",
        single,
        "--input",
        small_csv,
        "--output",
        one,
        "--embeddings",
        tmp_path / "one.npy",
        "--batch-size",
        16,
        "--chunk-size",
        50,
        "--audit",
        30,
        tmp_path / "audit_one.csv",
    )
    run(
        rank0_gathers_cmd(2, "predict.py")
        + [
            "--distributed",
            "--checkpoint",
            single,
            "--input",
            small_csv,
            "--output",
            str(two),
            "--embeddings",
            str(tmp_path / "two.npy"),
            "--batch-size",
            "16",
            "--chunk-size",
            "50",
            "--audit",
            "30",
            str(tmp_path / "audit_two.csv"),
        ]
    )
    # one process and two give the same bytes: each row is computed in the same batch
    # beside the same rows (Predictor.shared), whatever the number of processes
    assert one.read_bytes() == two.read_bytes()
    assert (tmp_path / "one.npy").read_bytes() == (tmp_path / "two.npy").read_bytes()
    assert (tmp_path / "audit_one.csv").read_bytes() == (tmp_path / "audit_two.csv").read_bytes()
    # the audit: drawn once, by rank 0, the same rows and design (fingerprints) as one process
    audit_one, audit_two = (
        pd.read_csv(tmp_path / f"audit_{n}.csv", dtype=str, keep_default_na=False)
        for n in ("one", "two")
    )
    assert len(audit_two) == 30
    assert_same_predictions(audit_two, audit_one)
    a = pd.read_csv(one, dtype=str, keep_default_na=False)
    b = pd.read_csv(two, dtype=str, keep_default_na=False)
    assert len(b) == 121
    assert_same_predictions(b, a)
    import mixer

    expected = mixer.load(single, device="cpu").embeddings(a["occ1"].tolist())
    assert_floats_close(np.load(tmp_path / "two.npy"), expected)


@pytest.mark.parametrize(
    "shape", [["--what", "probs"], ["--columns", "occcanine"], ["--alternatives", "2"]]
)
def test_predict_under_torchrun_gives_one_process_bytes_in_every_output_shape(
    single, small_csv, tmp_path, shape
):
    suffix = ".npy" if "--what" in shape else ".csv"
    one, two = tmp_path / f"one{suffix}", tmp_path / f"two{suffix}"
    run_program(
        "predict.py",
        "--checkpoint",
        single,
        "--input",
        small_csv,
        "--output",
        one,
        "--batch-size",
        16,
        "--chunk-size",
        50,
        *shape,
    )
    run(
        rank0_gathers_cmd(2, "predict.py")
        + [
            "--distributed",
            "--checkpoint",
            single,
            "--input",
            small_csv,
            "--output",
            str(two),
            "--batch-size",
            "16",
            "--chunk-size",
            "50",
            *shape,
        ]
    )
    assert one.read_bytes() == two.read_bytes()


GATHER_TO_MAIN = """
import json, os, sys
from mixer.core.config import DistConfig
from mixer.distributed import world as distributed

world = distributed.setup(DistConfig(distributed=True))
got = distributed.gather_to_main({"rank": world.rank, "rows": [world.rank] * 3}, world)
with open(os.path.join(sys.argv[1], f"rank{world.rank}.json"), "w") as handle:
    json.dump(got, handle)
distributed.teardown(world)
"""


def test_gather_to_main_gives_rank_zero_every_value_and_the_others_nothing(tmp_path):
    run(
        torchrun_cmd(2, "--standalone")
        + ["--no-python", sys.executable, "-c", GATHER_TO_MAIN, str(tmp_path)]
    )
    with open(tmp_path / "rank0.json") as zero, open(tmp_path / "rank1.json") as one:
        assert json.load(zero) == [{"rank": 0, "rows": [0, 0, 0]}, {"rank": 1, "rows": [1, 1, 1]}]
        assert json.load(one) is None


EXIT_AFTER_GROUP = """
import sys
from mixer.cli import parsing as cli
from mixer.core.config import DistConfig

def main(argv):
    from mixer.distributed import world as distributed
    world = distributed.setup(DistConfig(distributed=True))
    distributed.gather_objects(1, world)
    print("finished", end="")  # stdout is a pipe: this sits in Python's buffer
    distributed.teardown(world)
    return int(sys.argv[1])

cli.run_main(main, [])
"""


@pytest.mark.parametrize("code", [0, 3])
def test_a_process_that_joined_a_group_exits_with_its_status_and_its_output(code):
    """After a process group the process skips Python's shutdown (gloo's threads
    can abort it after a successful job); its exit status and buffered output
    must still come out."""
    env = env_for_subprocess()
    env.pop("PYTHONUNBUFFERED", None)
    env.update(
        RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="0"
    )  # one process hosts the store alone: port 0 binds a free one
    proc = run([sys.executable, "-c", EXIT_AFTER_GROUP, str(code)], check=False, env=env)
    assert proc.returncode == code, proc.stderr
    assert proc.stdout == "finished"


RELAYOUT = [
    "--seed",
    "5",
    "--num-epochs",
    "2",
    "--share-val",
    "0.09",
    "--target-cols",
    "hisco_1",
    "hisco_2",
    "--batch-size",
    "8",
    *TINY,
]


def relayout_cmd(procs: int, out, *extra) -> list:
    script = [os.path.join(ROOT, "finetune.py")]
    launcher = (
        [sys.executable]
        if procs == 1
        else torchrun_cmd(procs, "--standalone") + ["--no-python", sys.executable]
    )
    return (
        launcher
        + script
        + (["--distributed"] if procs > 1 else [])
        + ["--save-path", str(out), *RELAYOUT, *map(str, extra)]
    )


@pytest.mark.parametrize(
    "first,second,stop,expected_steps",
    [
        # 110 training rows: global batch 8 has 14 steps per epoch (the last of 6 rows), 16 has 7
        ((1, []), (2, []), 1, 1 + 7 + 7),  # 1 -> 2 processes
        ((2, []), (1, []), 2, 2 + 10 + 14),  # 2 -> 1
        ((1, []), (1, ["--grad-accum-steps", "2"]), 3, 3 + 6 + 7),  # accumulation 1 -> 2
    ],
)
def test_resume_with_another_global_batch_ends_on_the_planned_epochs(
    small_csv, tmp_path, first, second, stop, expected_steps
):
    out = tmp_path / "run"
    run(relayout_cmd(first[0], out, "--dataset", small_csv, *first[1], "--stop-at-step", stop))
    proc = run(relayout_cmd(second[0], out, "--dataset", small_csv, *second[1]), timeout=120)
    text = proc.stdout + proc.stderr
    assert "global batch changed from " in text and text.count("global batch changed") == 1
    state = torch.load(out / "last.pt", weights_only=True)
    assert len(state["rng"]) == second[0]  # each rank's random state, saved by rank 0
    if first[0] != second[0]:  # not rank 0's stream copied to every rank: their own draws
        assert "each rank's stream starts from (seed, rank, step)" in text
        torch_states = [rank_state["torch"] for rank_state in state["rng"]]
        assert all(not torch.equal(torch_states[0], other) for other in torch_states[1:])
    assert state["progress"]["step"] == expected_steps
    assert (state["progress"]["epoch"], state["progress"]["rows_in_epoch"]) == (2, 0)
    logs = pd.read_csv(out / "logs.csv")
    assert logs["epoch"].tolist() == [1, 2] and logs["step"].iloc[-1] == expected_steps
    assert logs["lr"].iloc[-1] == 0.0  # the schedule ended at the last step
    assert (out / "model.safetensors").exists()


SLOW_RANKS = """
import os, sys, time
sys.path.insert(0, {root!r})
import mixer.data.prepared.prepare, mixer.data.inputs.token_cache
rank = os.environ["RANK"]
if rank == "0":  # a preparation that outlasts --dist-timeout (time passing is the point)
    prepare = mixer.data.prepared.prepare.prepare
    mixer.data.prepared.prepare.prepare = lambda *a, **k: (time.sleep(5), prepare(*a, **k))[1]
else:  # and a share of the tokenising that does too
    build = mixer.data.inputs.token_cache.build_part
    mixer.data.inputs.token_cache.build_part = lambda *a, **k: (time.sleep(5), build(*a, **k))[1]
from mixer.cli.entrypoints import finetune_cli
finetune_cli()
"""


def test_preparing_and_tokenising_longer_than_the_timeout_is_not_a_failure(small_csv, tmp_path):
    """15M rows take minutes to prepare and tokenise: no rank may wait for that in a
    collective that --dist-timeout (here 2 s) would end."""
    script = tmp_path / "slow.py"
    script.write_text(SLOW_RANKS.format(root=ROOT))
    out = tmp_path / "run"
    proc = run(
        torchrun_cmd(2, "--standalone")
        + [
            str(script),
            "--distributed",
            "--dataset",
            small_csv,
            "--save-path",
            str(out),
            "--dist-timeout",
            "2",
            "--batch-size",
            "4",
            *EXACT,
        ],
        timeout=300,
    )
    assert "tokenising" in proc.stdout
    assert (out / "model.safetensors").exists()


def test_scale_lr_follows_the_global_batch_of_the_resumed_run(small_csv, tmp_path):
    """--scale-lr: the peak learning rate is the flags' for the global batch the run
    continues with (here doubled by accumulation 1 -> 2), and the resume line says so."""
    out = tmp_path / "run"
    run(relayout_cmd(1, out, "--dataset", small_csv, "--scale-lr", "--stop-at-step", 3))
    before = torch.load(out / "last.pt", weights_only=True)["scheduler"]["base_lrs"]
    proc = run(
        relayout_cmd(
            1,
            out,
            "--dataset",
            small_csv,
            "--scale-lr",
            "--grad-accum-steps",
            2,
            "--stop-at-step",
            5,
        )
    )
    after = torch.load(out / "last.pt", weights_only=True)
    assert after["scheduler"]["base_lrs"] == pytest.approx([2 * lr for lr in before], rel=1e-12)
    assert [g["initial_lr"] for g in after["optimizer"]["param_groups"]] == after["scheduler"][
        "base_lrs"
    ]
    assert "peak learning rate now" in proc.stdout + proc.stderr


# ------------------------------------------------------------------ early stopping, default recipe
# Issue 44's run: 300 rows, canine-tiny, early stopping on val_loss, dropout left at its default.
# With dropout drawn from each process's own stream, one process of batch 16 and two of batch 8
# differed from step 4 and stopped at other steps; keyed by the row, they stop at one step.
EARLY = [
    "--target-cols",
    "hisco_1",
    "--language",
    "en",
    "--seed",
    "3",
    "--share-val",
    "0.1",
    *TINY,
    "--max-steps",
    "60",
    "--eval-interval",
    "2",
    "--keep-best",
    "val_loss",
    "--early-stopping-patience",
    "2",
    "--early-stopping-min-delta",
    "0.03",
]


@pytest.fixture(scope="module")
def rows_300(tmp_path_factory, toy_frame) -> str:
    path = tmp_path_factory.mktemp("early") / "rows300.csv"
    toy_frame[toy_frame["hisco_1"].str.len() == 5].head(300).to_csv(path, index=False)
    return str(path)


@pytest.mark.floats
def test_early_stopping_stops_at_one_step_in_any_layout_with_the_default_dropout(
    tmp_path, rows_300
):
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    run_program(
        "finetune.py", "--dataset", rows_300, "--save-path", one, "--batch-size", 16, *EARLY
    )
    run(
        torchrun_cmd(2, "--standalone")
        + [
            os.path.join(ROOT, "finetune.py"),
            "--distributed",
            "--dataset",
            rows_300,
            "--save-path",
            two,
            "--batch-size",
            "8",
            *EARLY,
        ]
    )
    progress = [
        torch.load(os.path.join(d, "last.pt"), weights_only=True)["progress"] for d in (one, two)
    ]
    assert progress[0]["step"] == progress[1]["step"] < 60  # stopped early, at the same step
    assert progress[0]["stop_reason"].startswith("early stopping: val_loss did not improve")
    logs = [pd.read_csv(os.path.join(d, "logs.csv")) for d in (one, two)]
    assert logs[0]["step"].tolist() == logs[1]["step"].tolist()
    assert len(logs[0]) >= 6  # several evaluations: the masks of many steps were drawn
    np.testing.assert_allclose(
        logs[0]["val_loss"], logs[1]["val_loss"], atol=TRAINED_METRICS_ATOL, rtol=0
    )
    for name in ("model.safetensors", os.path.join("best", "model.safetensors")):
        assert (
            max_difference(load_file(os.path.join(one, name)), load_file(os.path.join(two, name)))
            < TRAINED_WEIGHTS_ATOL
        )


@pytest.mark.floats
def test_two_processes_share_a_chunk_s_new_inputs_and_write_what_one_process_writes(
    single, small_csv, tmp_path
):
    # a file of repeats (issue 43): each rank predicts a share of a chunk's inputs new to the
    # file, rank 0 gathers them (all-gathers refused) and writes every row
    frame = pd.read_csv(small_csv, dtype=str, keep_default_na=False)
    repeated = frame.iloc[np.random.default_rng(1).integers(0, len(frame), 400)]
    data = tmp_path / "repeated.csv"
    repeated.to_csv(data, index=False)
    common = [
        "--checkpoint",
        single,
        "--input",
        str(data),
        "--batch-size",
        "16",
        "--chunk-size",
        "50",
    ]
    run_program(
        "predict.py",
        *common,
        "--output",
        tmp_path / "one.csv",
        "--embeddings",
        tmp_path / "one.npy",
    )
    run(
        rank0_gathers_cmd(2, "predict.py")
        + [
            "--distributed",
            *map(str, common),
            "--output",
            str(tmp_path / "two.csv"),
            "--embeddings",
            str(tmp_path / "two.npy"),
        ]
    )
    one, two = (
        pd.read_csv(tmp_path / f"{n}.csv", dtype=str, keep_default_na=False) for n in ("one", "two")
    )
    assert len(two) == 400
    assert_same_predictions(two, one)
    # an embedding's components near 0 carry the rounding of its largest (other batches)
    two_vectors, one_vectors = np.load(tmp_path / "two.npy"), np.load(tmp_path / "one.npy")
    scale = np.abs(one_vectors).max(axis=1, keepdims=True)
    assert_floats_close(two_vectors / scale, one_vectors / scale)
    print(
        "byte-identical:",
        (tmp_path / "one.csv").read_bytes() == (tmp_path / "two.csv").read_bytes(),
    )
