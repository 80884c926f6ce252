"""The devkit's own detection plots and AP by distance band, for the evaluation report.

The plots are the nuScenes devkit's renderers (``nuscenes.eval.detection.render``: the summary,
per-class PR and TP-error curves, PR per distance threshold), called with PNG paths so a browser
shows them (``DetectionEval.render`` writes PDFs). AP by distance band re-runs the devkit's
``accumulate`` and ``calc_ap`` on the boxes of each band (by ``ego_dist``, the distance the devkit
filters class ranges with): per class the mean over the four centre-distance thresholds, per band
the mean over the classes with ground truth in it.
"""

from __future__ import annotations

import os

import numpy as np

DISTANCE_BANDS = ((0.0, 20.0), (20.0, 30.0), (30.0, 50.0))


def band_name(low: float, high: float) -> str:
    return f"{low:.0f}-{high:.0f}m"


def render_detection_plots(evaluation, metrics, md_list, plot_dir: str) -> list[str]:
    """The devkit's curves as PNGs in ``plot_dir``; their paths."""
    import matplotlib

    matplotlib.use("Agg")
    from nuscenes.eval.detection.render import class_pr_curve, class_tp_curve, dist_pr_curve, summary_plot

    os.makedirs(plot_dir, exist_ok=True)
    cfg, paths = evaluation.cfg, []

    def path(name: str) -> str:
        paths.append(os.path.join(plot_dir, name + ".png"))
        return paths[-1]

    summary_plot(md_list, metrics, min_precision=cfg.min_precision, min_recall=cfg.min_recall,
                 dist_th_tp=cfg.dist_th_tp, savepath=path("summary"))
    for dist_th in cfg.dist_ths:
        dist_pr_curve(md_list, metrics, dist_th, cfg.min_precision, cfg.min_recall, savepath=path(f"dist_pr_{dist_th}"))
    for name in cfg.class_names:
        class_pr_curve(md_list, metrics, name, cfg.min_precision, cfg.min_recall, savepath=path(f"{name}_pr"))
        class_tp_curve(md_list, metrics, name, cfg.min_recall, cfg.dist_th_tp, savepath=path(f"{name}_tp"))
    return paths


def ap_by_distance(evaluation, bands=DISTANCE_BANDS) -> dict[str, float]:
    """{"AP_<band>": mean AP, "AP_<band>_<class>": AP} from the devkit's matching on each band's boxes."""
    from nuscenes.eval.common.data_classes import EvalBoxes
    from nuscenes.eval.detection.algo import accumulate, calc_ap

    cfg, result = evaluation.cfg, {}
    for low, high in bands:
        in_band = lambda boxes: [b for b in boxes if low <= b.ego_dist < high]  # noqa: B023 (used at once)
        truth, predicted = EvalBoxes(), EvalBoxes()
        for token in evaluation.gt_boxes.sample_tokens:
            truth.add_boxes(token, in_band(evaluation.gt_boxes[token]))
            predicted.add_boxes(token, in_band(evaluation.pred_boxes[token]))
        per_class = []
        for name in cfg.class_names:
            if not any(b.detection_name == name for b in truth.all):
                continue
            aps = [calc_ap(accumulate(truth, predicted, name, cfg.dist_fcn_callable, th), cfg.min_recall,
                           cfg.min_precision) for th in cfg.dist_ths]
            result[f"AP_{band_name(low, high)}_{name}"] = float(np.mean(aps))
            per_class.append(float(np.mean(aps)))
        result[f"AP_{band_name(low, high)}"] = float(np.mean(per_class)) if per_class else float("nan")
    return result
