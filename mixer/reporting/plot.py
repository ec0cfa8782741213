"""Pictures of a run: training curves from logs.csv, and a summary of predictions.

python -m mixer.plot RUN_DIR          # writes RUN_DIR/training_curves.png
"""

from __future__ import annotations

import os
from typing import Optional

import pandas as pd

from mixer.core.errors import UserError

CURVES = "training_curves.png"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: works with no display (clusters, CI)
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig, dpi: int = 110) -> bytes:
    """A finished figure laid out (its legend outside the axes kept) as PNG bytes, and
    closed: a picture drawn before anything is written, so a file is written whole or not."""
    import io

    import matplotlib.pyplot as plt

    fig.tight_layout()
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=dpi)
    finally:
        plt.close(fig)
    return buffer.getvalue()


def plot_training_curves(run_dir: str, output: str = None) -> str:
    """Loss, accuracy, F1 and learning rate over steps, from logs.csv."""
    path = os.path.join(run_dir, "logs.csv")
    if not os.path.exists(path):
        raise UserError(f"{run_dir}: no logs.csv to plot (has the run evaluated yet?)")
    logs = pd.read_csv(path)
    plt = _pyplot()
    figure, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    panels = [
        (axes[0, 0], "loss", [("train_loss", "train"), ("val_loss", "validation")]),
        (
            axes[0, 1],
            "exact-match accuracy",
            [
                ("val_flat_accuracy", "flat head"),
                ("val_seq2seq_accuracy", "seq2seq head"),
                ("val_noisy_flat_accuracy", "flat head, noised rows"),
                ("val_noisy_seq2seq_accuracy", "seq2seq head, noised rows"),
            ],
        ),
        (
            axes[1, 0],
            "F1 (micro)",
            [("val_flat_f1", "flat head"), ("val_seq2seq_f1", "seq2seq head")],
        ),
        (axes[1, 1], "learning rate", [("lr", "encoder")]),
    ]
    for axis, title, series in panels:
        for column, label in series:
            if column in logs:
                axis.plot(logs["step"], logs[column], marker="o", markersize=3, label=label)
        axis.set_title(title)
        axis.set_xlabel("optimizer step")
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle(f"mixer run {os.path.basename(os.path.abspath(run_dir))}")
    output = output or os.path.join(run_dir, CURVES)
    figure.savefig(output, dpi=110)
    plt.close(figure)
    return output


def plot_prediction_summary(
    predictions: pd.DataFrame,
    output: str,
    top: int = 20,
    fmt: Optional[str] = None,
    stamp: Optional[float] = None,
) -> str:
    """Most frequent predicted codes, and the spread of the top code's probability. `fmt`:
    the image format where `output`'s suffix does not say it (a temp file's). `stamp`
    (seconds since the epoch): the time a PDF or SVG file states (predict.py's: its job's
    first start, as its other files state), and an SVG's ids drawn from it, not at random,
    so that the file's bytes depend on the rows and that time alone."""
    codes = predictions["code_1"].astype(str)
    counts = codes[codes != ""].value_counts().head(top)
    plt = _pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 5), constrained_layout=True)
    left.barh(counts.index[::-1], counts.to_numpy()[::-1])
    left.set_title(f"{len(counts)} most frequent predicted codes (code_1)")
    left.set_xlabel("rows")
    right.hist(
        pd.to_numeric(predictions["prob_1"], errors="coerce").dropna(), bins=20, range=(0, 1)
    )
    right.set_title("confidence of the top code (prob_1)")
    right.set_xlabel("probability")
    right.set_ylabel("rows")
    kind = (fmt or os.path.splitext(output)[1].lstrip(".")).lower()
    metadata, salt = None, None
    if stamp is not None:
        import datetime as dt

        when = dt.datetime.fromtimestamp(int(stamp), dt.timezone.utc)
        metadata = {"pdf": {"CreationDate": when}, "svg": {"Date": when.isoformat()}}.get(kind)
        salt = str(int(stamp))
    with plt.rc_context({"svg.hashsalt": salt}):
        figure.savefig(output, dpi=110, format=fmt, metadata=metadata)
    plt.close(figure)
    return output
