"""What a deployed camera model's consumer needs to know: the sidecar JSON of an exported model.

Everything that runs outside the graph is named here with the code that does it, so an
in-vehicle implementation can be checked against the Python one.
"""

from __future__ import annotations

from perception.core.lane_coding import LANE_CLASSES
from perception.core.light_states import LIGHT_STATES
from perception.core.nuscenes_constants import DETECTION_CLASSES
from perception.core.obstacle_coding import ATTRIBUTE_NAMES, F_REF
from perception.data.transforms import IMAGENET_MEAN_RGB, IMAGENET_STD_RGB

INPUT_NAME = "images"

OUTPUT_MEANINGS = {
    "drivable.logits": "[B,2,H/4,W/4] class logits at stride 4 of the input; softmax over dim 1, channel 1 = drivable",
    "obstacles.logits": "[B,Q,C] class logits, sigmoid per class (no background class); C = obstacle classes",
    "obstacles.boxes": "[B,Q,4] 2D box (cx, cy, w, h) normalised to [0, 1] of the network input",
    "obstacles.center": "[B,Q,2] projected 3D box centre (u, v) normalised to [0, 1] of the network input",
    "obstacles.depth": f"[B,Q] depth code: depth_m = exp(code) * fx_input / {F_REF:g} (fx of the network input)",
    "obstacles.size": "[B,Q,3] log of (width, length, height) in metres",
    "obstacles.yaw": "[B,Q,2] (sin, cos) of the yaw in the camera frame (x right, y down, z forward)",
    "obstacles.velocity": "[B,Q,2] (v_x, v_z) m/s in the camera frame",
    "obstacles.attribute": "[B,Q,A] attribute logits (argmax over the class's allowed attributes)",
    "lanes.logits": "[B,Q,C] lane class logits, sigmoid (no background class); C = lane classes",
    "lanes.points": "[B,Q,P] x at P anchor rows y_k = (k + 0.5) / P * H, divided by the input width "
                    "(outside [0, 1]: the lane is off the image at that row; use lanes.visibility)",
    "lanes.visibility": "[B,Q,P] logit that the lane crosses anchor row k inside the image",
    "lights.logits": "[B,Q,4] traffic-light state logits, sigmoid per state (order: light states)",
    "lights.boxes": "[B,Q,4] 2D box (cx, cy, w, h) normalised to [0, 1] of the network input",
}

PREPROCESSING = {
    "colour_order": "RGB",
    "layout": "NCHW float32",
    "mean": [round(m * 255.0, 4) for m in IMAGENET_MEAN_RGB],
    "std": [round(s * 255.0, 4) for s in IMAGENET_STD_RGB],
    "value": "(pixel_0_255 - mean) / std per channel",
    "geometry": "scale the whole image so its width equals the input width (bilinear), keep the bottom H rows "
                "(the sky is cropped); pad black below if the scaled image is shorter than H",
    "code": "perception.inference.preprocess.prepare_image (returns the original->input affine used by "
            "post-processing)",
}

POSTPROCESSING_CODE = {
    "drivable": "perception.postprocess.drivable.drivable_probability + to_original_image",
    "obstacles": "perception.postprocess.obstacles.decode_image (sigmoid -> top-k, no NMS) + to_global",
    "lanes": "perception.postprocess.lanes.decode_lanes",
    "lights": "perception.postprocess.lights.decode_lights (sigmoid -> top-k, no NMS)",
}


def class_names(output_names: list[str]) -> dict[str, list[str]]:
    """Class names of each task present in the graph."""
    tasks = {name.split(".")[0] for name in output_names}
    names = {}
    if "drivable" in tasks:
        names["drivable"] = ["not_drivable", "drivable"]
    if "obstacles" in tasks:
        names["obstacles"] = list(DETECTION_CLASSES)
        names["obstacle_attributes"] = list(ATTRIBUTE_NAMES)
    if "lanes" in tasks:
        names["lanes"] = list(LANE_CLASSES)
    if "lights" in tasks:
        names["lights"] = list(LIGHT_STATES)
    return names


def build_sidecar(input_shape: list, output_shapes: dict[str, list], postprocess: dict, opset: int,
                  provenance: dict, checks: dict) -> dict:
    return {
        "model": "PerceptionModel (perception.models.perception_model): Swin backbone, FPN, task heads",
        "input": {"name": INPUT_NAME, "shape": input_shape, "dtype": "float32", **PREPROCESSING},
        "outputs": {name: {"shape": shape, "dtype": "float32", "meaning": OUTPUT_MEANINGS.get(name, "")}
                    for name, shape in output_shapes.items()},
        "class_names": class_names(list(output_shapes)),
        "postprocess": {"parameters": postprocess, "code": {task: code for task, code in POSTPROCESSING_CODE.items()
                                                            if any(n.startswith(task) for n in output_shapes)}},
        "opset": opset,
        **provenance,
        "checks": checks,
    }
