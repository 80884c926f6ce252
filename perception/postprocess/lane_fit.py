"""A robust straight-line fit through a decoded lane's points (``postprocess.lane_line_fit_px``).

The lane head places each anchor row's x on its own (the row kernels' snap to the marking map), and
a row that snaps to the neighbouring marking puts a kink into an otherwise straight lane; one kink
is enough to push the drawn lane below the F1's IoU of 0.5. Replacing the rows by x = a + b y fitted
with Huber weights keeps the rows that agree and discounts the ones that jumped. Straight is the
prior because a straight road stays straight under perspective. On a curve a line is the wrong
model; the held-out gain in the README's convergence study (``lane_line_fit``) is over the synthetic
roads as they come, and curved roads were not scored on their own (bench/lane_error.py does: 42 % of the demo's
held-out lanes bend 20 px or more from a line).

With ``horizon_y`` the model is x = a + b y + c / (y - horizon) instead: the image of a lane that curves on
flat ground (``postprocess.lane_fit_horizon_row``, for a head with ``model.heads.lanes.horizon_row``).
"""

from __future__ import annotations

import numpy as np

IRLS_ITERATIONS = 10
HORIZON_MIN_GAP_PX = 4.0  # rows nearer the horizon than this count as this near (c / (y - h) stays bounded)


def robust_line_fit(polyline: np.ndarray, huber_scale: float, horizon_y: float | None = None) -> np.ndarray:
    """polyline [K,2] (x, y) px -> the same rows with x on the Huber-weighted line x = a + b y, or with
    ``horizon_y`` (px, the polyline's frame) on the perspective curve x = a + b y + c / (y - horizon_y).

    ``huber_scale``: residual (px, the polyline's frame) beyond which a row's weight falls as 1 / |r|.
    Polylines with no more rows than the model has terms are returned unchanged (they fit exactly)."""
    if huber_scale <= 0:
        raise ValueError(f"huber_scale must be > 0 px, got {huber_scale}")
    points = np.asarray(polyline, np.float64)
    x, y = points[:, 0], points[:, 1]
    columns = [np.ones_like(y), y]
    if horizon_y is not None:
        columns.append(1.0 / np.maximum(y - horizon_y, HORIZON_MIN_GAP_PX))
    design = np.stack(columns, axis=1)  # [K, 2 or 3]
    if len(points) <= design.shape[1]:
        return points.copy()
    weights = np.ones_like(x)
    for _ in range(IRLS_ITERATIONS):  # iteratively reweighted least squares
        root = np.sqrt(weights)[:, None]
        coefficients, *_ = np.linalg.lstsq(design * root, x * root[:, 0], rcond=None)
        residual = np.abs(x - design @ coefficients)
        weights = np.where(residual <= huber_scale, 1.0, huber_scale / np.maximum(residual, 1e-12))
    fitted = points.copy()
    fitted[:, 0] = design @ coefficients
    return fitted
