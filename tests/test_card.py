"""The model card (mixer.reporting.card): what a run measured and nothing it did not, and
every job that trained the weights, rendered from hand-made facts."""

from __future__ import annotations

import pandas as pd
import yaml


def card_facts() -> dict:
    return {
        "name": "r",
        "version": "0.2.0",
        "data": {
            "files": [("d.csv", "ab")],
            "rows": {"train": 90, "val": 10},
            "digest": "cd",
            "languages": {"en": 50, "da": 40},
            "input_col": "occ1",
            "context_cols": [],
            "system": "hisco",
            "block_size": 5,
            "codes_per_row": 2,
            "key_size": 1919,
        },
        "start": {
            "encoder": "OccCANINE hub x",
            "kind": "occcanine",
            "origin": "Christianvedel/OccCANINE_s2s_mix",
            "family": "occcanine",
        },
        "job": {
            "command": "python finetune.py --dataset d.csv",
            "launch": None,
            "layout": "8 (...)",
            "recipe": "recipe: x",
            "precision": "fp32",
            "weight_decay": 0.01,
            "evaluated_rows": 10,
            "eval_noise": 0,
            "keep_best": None,
            "patience": None,
            "min_delta": 0.0,
        },
    }


def test_a_card_leaves_out_what_the_run_did_not_measure():
    from mixer.reporting.card import render
    from mixer.reporting.metrics import Thresholds

    facts = card_facts()
    table = pd.DataFrame(
        {
            "lang": ["all", "all", "da", "da", "en", "en"],
            "head": ["flat", "seq2seq"] * 3,
            "digits": [5] * 6,
            "n": [10, 10, 4, 4, 6, 6],
            "accuracy": [0.5, 0.4, 0.25, 0.5, 0.6667, 0.3333],
        }
    )
    model = {
        "which": "last",
        "where": "runs/r",
        "step": 30,
        "place": [3, 0],
        "metrics": {"val_rows": 10, "val_loss": 1.25, "val_flat_accuracy": 0.5},
        "table": table.to_csv(index=False),
        "thresholds": Thresholds.of(0.31, {"da": 0.24}),
        "thresholds_origin": "the starting model's",
        "other": None,
        "progress": {
            "step": 30,
            "total_steps": 30,
            "planned_epochs": 3,
            "epochs": 3.0,
            "stop_reason": None,
            "elapsed": 0.0,
            "ended": True,
        },
    }
    text = render(facts, model)
    meta = yaml.safe_load(text.split("---\n")[1])
    assert meta["base_model"] == "Christianvedel/OccCANINE_s2s_mix" and meta["language"] == [
        "da",
        "en",
    ]
    assert [m["name"] for m in meta["model-index"][0]["results"][0]["metrics"]] == [
        "flat head accuracy"
    ]
    assert "noised" not in text.split("## Validation metrics")[1].split("By language")[0]
    assert "| loss | 1.2500 |" in text and "| flat head accuracy | 0.5000 |" in text
    assert "| da | 4 | 0.2500 | 0.5000 |" in text and "| en | 6 | 0.6667 | 0.3333 |" in text
    assert "above 0.31 (by language: da 0.24), no code forced (OccCANINE's rule)" in text
    assert (
        "optimistically" not in text and "of training" not in text
    )  # the last step's; no time measured
    assert "Training ended at step 30 of 30 planned, 3.00 of 3 epochs: the planned end." in text
    one_language = render(
        dict(facts, data=dict(facts["data"], languages={"unk": 100})),
        dict(model, table=table[table["lang"] != "da"].to_csv(index=False)),
    )
    assert "By language" not in one_language and "language:" not in one_language.split("---")[1]


def test_a_card_names_every_job_that_trained_the_weights_and_the_schedule_as_resumed():
    """Two jobs in two layouts, each reading other validation rows, then a third that trained
    nothing (a stopped run run again with another patience); torchrun; a path with spaces."""
    from mixer.reporting.card import model_card

    facts = card_facts()
    first = dict(
        facts["job"],
        command="python finetune.py --batch-size 16 --stop-at-step 20",
        from_step=0,
        layout="16 (1 process(es) x 16 rows x 1 accumulation step(s))",
        evaluated_rows=200,
        keep_best="val_loss",
        patience=2,
    )
    second = dict(
        first,
        command="python finetune.py --batch-size 32 --val-max-rows 800",
        from_step=20,
        layout="32 (1 process(es) x 32 rows x 1 accumulation step(s))",
        evaluated_rows=800,
    )
    again = dict(
        second,
        command="python finetune.py --batch-size 32 --early-stopping-patience 5",
        patience=5,
        from_step=30,
    )
    progress = {
        "step": 30,
        "total_steps": 30,
        "planned_epochs": 1,
        "epochs": 1.0,
        "elapsed": 0.0,
        "ended": True,
        "stop_reason": "early stopping: val_loss did not improve on 1.0000 (step 24, epoch 1) in 2 "
        "evaluation(s)",
        "jobs": [first, second, again],
    }
    last = {"step": 30, "place": [1, 0], "metrics": {"val_rows": 800, "val_loss": 1.5}}
    text = model_card(facts, "/tmp/r28/sp ace/run 1", {}, progress, None, last)
    assert "Made by 2 jobs, each continuing from the training state the one before saved:" in text
    assert (
        "Steps 0 to 20:\n\n```bash\npython finetune.py --batch-size 16 --stop-at-step 20\n```\n\n"
        "Steps 20 to 30:\n\n```bash\npython finetune.py --batch-size 32 --val-max-rows 800\n```"
    ) in text
    assert (
        "patience 5" not in text and "after 5 evaluation(s)" not in text
    )  # the job that trained nothing
    assert (
        "| best model | kept by val_loss; early stopping after 2 evaluation(s) without an improvement"
        in text
    )
    assert "| length | 1 epoch(s) planned, 30 steps;" in text and "at step 30 of 30 planned" in text
    assert "(each evaluation reads 200 (steps 0 to 20); 800 (steps 20 to 30))" in text
    assert (
        "| batch | 16 (1 process(es) x 16 rows x 1 accumulation step(s)); precision fp32, weight decay 0.01 "
        "(steps 0 to 20); 32 (1 process(es)"
    ) in text
    assert "python predict.py --checkpoint '/tmp/r28/sp ace/run 1' --input" in text
    assert 'mixer.load("/tmp/r28/sp ace/run 1")' in text
    # a requeued job with the same command is the same job; several processes say how they ran
    launched = dict(first, launch="launched by torchrun as 2 processes (1 node(s) x 2)")
    progress = dict(
        progress, step=20, total_steps=40, jobs=[launched, dict(launched, from_step=12)]
    )
    text = model_card(facts, "runs/r", {}, progress, None, dict(last, step=20, place=[0, 320]))
    assert "Made by" not in text and "Steps 0 to" not in text
    assert (
        "```bash\npython finetune.py --batch-size 16 --stop-at-step 20\n```\n\nLaunched by torchrun as 2 "
        "processes (1 node(s) x 2): each process ran this command."
    ) in text
    assert "The weights of the run's last step, step 20 (epoch 1)." in text
