"""Learning curves from a work dir's CSV log: training loss and held-out metrics against the step."""

from __future__ import annotations

import csv
import math
import os


def read_curves(metrics_csv: str) -> dict[str, list[tuple[int, float]]]:
    """{column: [(step, value), ...]} of every numeric column of Lightning's CSV log."""
    curves: dict[str, list[tuple[int, float]]] = {}
    with open(metrics_csv) as f:
        for row in csv.DictReader(f):
            step = row.get("step")
            if not step:
                continue
            for key, value in row.items():
                if key in ("step", "epoch") or value in ("", None):
                    continue
                try:
                    number = float(value)
                except ValueError:
                    continue
                if math.isfinite(number):
                    curves.setdefault(key, []).append((int(float(step)), number))
    return curves


def plot_curves(metrics_csv: str, out_png: str, title: str = "") -> str:
    """Two panels: train/loss (raw and smoothed) and the heldout/* metrics, both against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = read_curves(metrics_csv)
    figure, (loss_axis, metric_axis) = plt.subplots(1, 2, figsize=(11, 4))
    loss = curves.get("train/loss", [])
    if loss:
        steps, values = zip(*loss)
        loss_axis.plot(steps, values, color="0.75", linewidth=0.8, label="train/loss")
        window = max(len(values) // 20, 1)
        smoothed = [sum(values[max(0, i - window + 1):i + 1]) / len(values[max(0, i - window + 1):i + 1])
                    for i in range(len(values))]
        loss_axis.plot(steps, smoothed, color="C0", label=f"moving mean of {window}")
        loss_axis.set_yscale("log")
    loss_axis.set(xlabel="step", ylabel="training loss", title="training loss")
    loss_axis.legend(loc="upper right")
    for key in sorted(k for k in curves if k.startswith("heldout/")):
        steps, values = zip(*sorted(curves[key]))
        metric_axis.plot(steps, values, marker="o", label=key[len("heldout/"):])
    metric_axis.set(xlabel="step", ylabel="score", ylim=(0, 1), title="held-out scenes")
    metric_axis.grid(alpha=0.3)
    if any(k.startswith("heldout/") for k in curves):
        metric_axis.legend(loc="upper left", fontsize=8)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out_png)), exist_ok=True)
    figure.savefig(out_png, dpi=90)
    plt.close(figure)
    return out_png
