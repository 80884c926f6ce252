"""How 3D obstacle quantities are encoded as network outputs, and decoded back.

Shared by the criterion (encode targets) and the post-processor (decode predictions), so
both agree by construction.

- Depth: monocular depth is only defined up to the focal length (an object at z metres
  looks f/z pixels per metre), so the network predicts log(z * F_REF / fx) with fx the
  input image's focal length; this transfers across cameras and resizes.
- Size: log of (w, l, h) in metres.
- Yaw: (sin, cos) of yaw_cam = atan2(h_x, h_z), the box heading in the camera x-z plane.
- Velocity: (v_x, v_z) in m/s in the camera frame.
- Projected 3D centre: offset from the 2D box centre in units of the 2D box size.
"""

from __future__ import annotations

import math

import torch

from perception.core.nuscenes_constants import ATTRIBUTES, DETECTION_CLASSES

F_REF = 500.0  # pixels; a reference focal length, any constant works
ATTRIBUTE_NAMES = tuple(name for name, _ in ATTRIBUTES)
NO_ATTRIBUTE = -1
CLASS_ATTRIBUTES = {  # attributes the devkit scores per class (others have none)
    **{c: ("vehicle.moving", "vehicle.stopped", "vehicle.parked")
       for c in ("car", "truck", "bus", "trailer", "construction_vehicle")},
    "pedestrian": ("pedestrian.moving", "pedestrian.standing", "pedestrian.sitting_lying_down"),
    "motorcycle": ("cycle.with_rider", "cycle.without_rider"),
    "bicycle": ("cycle.with_rider", "cycle.without_rider"),
    "traffic_cone": (),
    "barrier": (),
}
assert set(CLASS_ATTRIBUTES) == set(DETECTION_CLASSES)
PRIOR_LOG_SIZE = tuple(math.log(v) for v in (1.9, 4.6, 1.7))  # a car: a sensible starting point


def encode_depth(depth: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
    return torch.log(depth.clamp(min=0.1) * F_REF / fx)


def decode_depth(code: torch.Tensor, fx) -> torch.Tensor:
    return torch.exp(code) * fx / F_REF


def attribute_index(name: str) -> int:
    return ATTRIBUTE_NAMES.index(name) if name else NO_ATTRIBUTE
