"""minADE_k / minFDE_k / miss rate over the k most probable modes, as the nuScenes devkit defines
them (``nuscenes.eval.prediction.metrics``): a miss is a mode whose *largest* pointwise error
reaches the tolerance. Used for validation during training; ``tools/test.py`` scores with the
devkit itself, and a test checks that both agree.
"""

from __future__ import annotations

import numpy as np


def trajectory_errors(trajectories: np.ndarray, probabilities: np.ndarray, future: np.ndarray, k: int,
                      miss_tolerance: float = 2.0) -> dict[str, np.ndarray]:
    """trajectories [N,K,T,2], probabilities [N,K], future [N,T,2] (same frame) -> per-agent [N] arrays."""
    k = min(k, trajectories.shape[1])
    top = np.argsort(-probabilities, axis=1, kind="stable")[:, :k]
    chosen = np.take_along_axis(trajectories, top[:, :, None, None], axis=1)  # (N, k, T, 2)
    distance = np.linalg.norm(chosen - future[:, None], axis=-1)  # (N, k, T)
    return {"ade": distance.mean(-1).min(1), "fde": distance[..., -1].min(1),
            "miss": (distance.max(-1) >= miss_tolerance).all(1).astype(np.float64)}


class TrajectoryMetrics:
    """Accumulates minADE_k, minFDE_k and MissRate_2_k over batches."""

    def __init__(self, k: int = 5, miss_tolerance: float = 2.0):
        self.k, self.miss_tolerance = k, miss_tolerance
        self.reset()

    def reset(self) -> None:
        self.sums = {"ade": 0.0, "fde": 0.0, "miss": 0.0}
        self.count = 0

    def update(self, trajectories, probabilities, future) -> None:
        errors = trajectory_errors(np.asarray(trajectories), np.asarray(probabilities), np.asarray(future), self.k,
                                   self.miss_tolerance)
        for key in self.sums:
            self.sums[key] += float(errors[key].sum())
        self.count += len(errors["ade"])

    def compute(self) -> dict[str, float]:
        n = max(self.count, 1)
        tol = f"{self.miss_tolerance:g}"
        return {f"minADE_{self.k}": self.sums["ade"] / n, f"minFDE_{self.k}": self.sums["fde"] / n,
                f"MissRate_{tol}_{self.k}": self.sums["miss"] / n}
