"""nuScenes detection submission JSON and scoring with the official devkit's DetectionEval."""

from __future__ import annotations

import json
import os

SUBMISSION_META = {"use_camera": True, "use_lidar": False, "use_radar": False, "use_map": False,
                   "use_external": False}
MAX_BOXES_PER_SAMPLE = 500


def write_submission(results: dict[str, list[dict]], sample_tokens: list[str], path: str) -> str:
    """Write the devkit's result format: exactly the split's sample tokens, each present (maybe
    with no boxes), at most 500 boxes each (the devkit rejects anything else)."""
    unknown = set(results) - set(sample_tokens)
    if unknown:
        raise ValueError(f"{len(unknown)} result sample tokens are not in the split, e.g. {sorted(unknown)[:2]}")
    body = {token: [dict(box, sample_token=token) for box in results.get(token, [])[:MAX_BOXES_PER_SAMPLE]]
            for token in sample_tokens}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"meta": SUBMISSION_META, "results": body}, f)
    return path


def run_detection_eval(nusc, result_path: str, split: str, output_dir: str,
                       config_name: str = "detection_cvpr_2019", plot_dir: str | None = None) -> dict[str, float]:
    """Run DetectionEval on ``split`` (official or custom); flat ``nuscenes/*`` metrics.

    With ``plot_dir`` the devkit's curves are rendered there (PNG) and AP by distance band is added
    (``nuscenes/AP_0-20m`` ...; ``perception.scoring.nuscenes_report``)."""
    from nuscenes.eval.detection.config import config_factory
    from nuscenes.eval.detection.constants import DETECTION_NAMES
    from nuscenes.eval.detection.evaluate import DetectionEval

    with open(result_path) as f:
        if not any(json.load(f)["results"].values()):
            # The devkit cannot score a submission without a single box (it raises "Invalid box
            # type: None"); its own conventions give AP 0 and TP errors 1 (so NDS 0) for no detections.
            print(f"warning: {result_path} holds no detection at all; scoring it as mAP 0, NDS 0")
            flat = {"nuscenes/mAP": 0.0, "nuscenes/NDS": 0.0}
            flat.update({f"nuscenes/{k}": 1.0 for k in ("mATE", "mASE", "mAOE", "mAVE", "mAAE")})
            flat.update({f"nuscenes/AP_{name}": 0.0 for name in DETECTION_NAMES})
            return flat

    evaluation = DetectionEval(nusc, config_factory(config_name), result_path, split, output_dir, verbose=False)
    metrics, metric_data = evaluation.evaluate()
    summary = metrics.serialize()
    flat = {"nuscenes/mAP": summary["mean_ap"], "nuscenes/NDS": summary["nd_score"]}
    names = {"trans_err": "mATE", "scale_err": "mASE", "orient_err": "mAOE", "vel_err": "mAVE", "attr_err": "mAAE"}
    for key, short in names.items():
        flat[f"nuscenes/{short}"] = summary["tp_errors"][key]
    for name, ap in summary["mean_dist_aps"].items():
        flat[f"nuscenes/AP_{name}"] = ap
    if plot_dir is not None:
        from perception.scoring.nuscenes_report import ap_by_distance, render_detection_plots

        render_detection_plots(evaluation, metrics, metric_data, plot_dir)
        flat.update({f"nuscenes/{k}": v for k, v in ap_by_distance(evaluation).items()})
    with open(os.path.join(output_dir, "metrics_summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return flat
