"""Traffic lights with their state: a DETR-style 2D box head reading the stride-4 level; COCO AP50 per state.

Labels: BDD100K-format detection frames only (nuScenes has no light states).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from perception.core.errors import ConfigError
from perception.core.light_states import LIGHT_STATES
from perception.losses.box_set_loss import LightCriterion
from perception.metrics.box_ap import coco_ap50
from perception.postprocess.lights import decode_lights
from perception.tasks.base import ScoringContext, Task, box_set_criterion, validate_box_query_head
from perception.tasks.decoder_config import BoxQueryConfig


@dataclass
class LightHeadConfig(BoxQueryConfig):
    levels: tuple = (0, 1, 2)  # lights are small: the stride-4 level is part of the memory


class LightTask(Task):
    name = "lights"
    config_class = LightHeadConfig
    labelled_datasets = ("bdd100k",)
    loss_names = LightCriterion.loss_names
    output_meanings = {
        "lights.logits": "[B,Q,4] traffic-light state logits, sigmoid per state (order: light states)",
        "lights.boxes": "[B,Q,4] 2D box (cx, cy, w, h) normalised to [0, 1] of the network input",
    }
    class_names = {"lights": list(LIGHT_STATES)}
    postprocess_code = "perception.postprocess.lights.decode_lights (sigmoid -> top-k, per-class NMS if configured)"
    query_outputs = True
    int8_float = True  # small boxes: INT8 cost light AP50 (perception.export.int8)

    def validate(self, head: LightHeadConfig, cfg) -> None:
        validate_box_query_head(self.name, head)
        if cfg.bdd100k is None:  # nuScenes has no light states: the head would never see a label
            raise ConfigError("model.heads.lights needs traffic-light labels, which only BDD100K-format data has; "
                              "set bdd100k=dict(data_root=...) or lights=None")

    def build_head(self, head: LightHeadConfig, in_channels: int, input_size: tuple[int, int]):
        from perception.models.heads.lights import LightHead

        return LightHead(in_channels, **head.decoder_kwargs())

    def build_criterion(self, cfg):
        return box_set_criterion(LightCriterion, cfg.matcher, one_to_many_iou=cfg.matcher.light_one_to_many_iou)

    def empty_targets(self) -> dict:
        return {"valid": False, "boxes_xyxy": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.int64)}

    def item_targets(self, dataset, info: dict, out: dict) -> dict | None:
        """BDD100K: the transform's box slot holds the lights (input px); ``valid``: the frame is in det JSON."""
        if dataset.name != "bdd100k":
            return None
        lights = info["lights"] or {"labels": []}
        return {"valid": info["lights"] is not None, "boxes_xyxy": torch.from_numpy(out["boxes_xyxy"]),
                "labels": torch.as_tensor(np.asarray(lights["labels"], np.int64).reshape(-1)[out["box_indices"]])}

    def decode(self, outputs, i, input_size, affine, orig_size, post, input_intrinsics=None) -> dict:
        """boxes_xyxy [N,4] original px, labels [N] (LIGHT_STATES), scores [N]."""
        return decode_lights(outputs, i, tuple(input_size), affine, post.light_max_per_image,
                             post.light_score_threshold, post.light_nms_iou)

    def draw(self, canvas, prediction, intrinsics, min_score) -> None:
        from perception.drawing import draw_lights

        draw_lights(canvas, prediction, min_score)

    def image_result(self, cfg, dataset, outputs, i, meta, info) -> dict:
        if meta["lights_gt"] is None:
            return {}
        return {"lights": self.decode(outputs, i, cfg.input_size, meta["affine"], meta["orig_size"],
                                      cfg.postprocess), "lights_gt": meta["lights_gt"]}

    def score(self, results: list[dict], context: ScoringContext) -> dict[str, float]:
        scored = [r for r in results if "lights" in r]
        if not scored:
            return {}
        ap = coco_ap50([r["lights_gt"] for r in scored], [r["lights"] for r in scored], LIGHT_STATES)
        return {f"lights/{k}": v for k, v in ap.items()}


LIGHTS = LightTask()
