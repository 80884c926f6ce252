"""One image with every task's prediction drawn (``Task.draw``) and a top-down panel of its obstacles."""

from __future__ import annotations

import numpy as np

from perception.drawing import bev_panel


def annotate(image_rgb: np.ndarray, prediction: dict, intrinsics: np.ndarray, tasks: tuple, min_score: float = 0.3,
             with_bev: bool = True) -> np.ndarray:
    """``prediction``: Perceiver's result by task name; ``tasks``: the specs that drew it, in drawing order.
    ``with_bev``: a square BEV panel (forward up) of the tasks' top-down entries on the right."""
    canvas = image_rgb.copy()
    for task in tasks:
        if prediction.get(task.name) is not None:
            task.draw(canvas, prediction[task.name], intrinsics, min_score)
    if not with_bev:
        return canvas
    entries = [entry for task in tasks if prediction.get(task.name) is not None
               for entry in task.bev_entries(prediction[task.name], min_score)]
    return np.concatenate([canvas, bev_panel(entries, canvas.shape[0])], axis=1)
