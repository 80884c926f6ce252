"""What a deployed camera model's consumer needs to know: the sidecar JSON of an exported model.

Everything that runs outside the graph is named here with the code that does it, so an
in-vehicle implementation can be checked against the Python one. What each output means, its
class names and its post-processing come from the task specs (perception.tasks).
"""

from __future__ import annotations

from perception.data.transforms import IMAGENET_MEAN_RGB, IMAGENET_STD_RGB
from perception.tasks import CAMERA_TASKS

INPUT_NAME = "images"

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

def build_sidecar(input_shape: list, output_shapes: dict[str, list], postprocess: dict, opset: int,
                  provenance: dict, checks: dict, tasks: tuple = CAMERA_TASKS) -> dict:
    """``tasks``: the specs that name the outputs (``Task.output_meanings``, class names, post-processing code)."""
    present = [t for t in tasks if any(name.startswith(f"{t.name}.") for name in output_shapes)]
    meanings = {name: meaning for t in present for name, meaning in t.output_meanings.items()}
    return {
        "model": "PerceptionModel (perception.models.perception_model): Swin backbone, FPN, task heads",
        "input": {"name": INPUT_NAME, "shape": input_shape, "dtype": "float32", **PREPROCESSING},
        "outputs": {name: {"shape": shape, "dtype": "float32", "meaning": meanings.get(name, "")}
                    for name, shape in output_shapes.items()},
        "class_names": {key: list(names) for t in present for key, names in t.class_names.items()},
        "postprocess": {"parameters": postprocess, "code": {t.name: t.postprocess_code for t in present}},
        "opset": opset,
        **provenance,
        "checks": checks,
    }
