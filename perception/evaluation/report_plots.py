"""Matplotlib figures of the evaluation report (the devkit draws its own: nuscenes_report.py).

Every function writes one PNG and returns its path, or None when there is nothing to draw.
"""

from __future__ import annotations

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def precision_recall_plot(curves: dict[str, tuple[np.ndarray, np.ndarray]], title: str, path: str,
                          operating_point: tuple[float, float] | None = None) -> str | None:
    """``curves``: name -> (recall [R], precision [R]); ``operating_point``: (recall, precision) marked."""
    curves = {k: v for k, v in curves.items() if len(v[0])}
    if not curves:
        return None
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(5.5, 4.2))
    for name, (recall, precision) in curves.items():
        axis.plot(recall, precision, label=name, linewidth=1.8)
    if operating_point is not None:
        axis.plot(*operating_point, "ko", label="reported operating point")
    axis.set(xlim=(0, 1), ylim=(0, 1.02), xlabel="recall", ylabel="precision", title=title)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8, loc="best")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def confusion_plot(matrix: np.ndarray, labels: list[str], title: str, path: str) -> str | None:
    """Counts with rows = labelled, columns = predicted; the last row/column are 'no light' / 'missed'."""
    if matrix.sum() == 0:
        return None
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(5.2, 4.4))
    axis.imshow(matrix, cmap="Blues")
    rows = labels[:-1] + ["(none: false positive)"]
    columns = labels[:-1] + ["(missed)"]
    axis.set_xticks(range(len(columns)), columns, rotation=30, ha="right", fontsize=8)
    axis.set_yticks(range(len(rows)), rows, fontsize=8)
    axis.set(xlabel="predicted state", ylabel="labelled state", title=title)
    for (r, c), count in np.ndenumerate(matrix):
        axis.text(c, r, str(count), ha="center", va="center", fontsize=8,
                  color="white" if count > matrix.max() / 2 else "black")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def bar_plot(values: dict[str, float], title: str, ylabel: str, path: str) -> str | None:
    values = {k: v for k, v in values.items() if v == v}  # NaN: no ground truth there
    if not values:
        return None
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(max(4.0, 0.6 * len(values) + 1.5), 3.6))
    axis.bar(range(len(values)), list(values.values()), color="#4477aa")
    axis.set_xticks(range(len(values)), list(values), rotation=30, ha="right", fontsize=8)
    axis.set(ylim=(0, max(0.05, max(values.values()) * 1.15)), ylabel=ylabel, title=title)
    for x, v in enumerate(values.values()):
        axis.text(x, v, f"{v:.3f}", ha="center", va="bottom", fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
