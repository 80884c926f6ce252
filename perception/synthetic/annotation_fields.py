"""The nuScenes annotation fields the synthetic writer derives: attribute, lidar point count, visibility."""

from __future__ import annotations

import math

from perception.synthetic.traffic import Track


def annotation_attribute(track: Track, speed: float) -> str | None:
    category = track.category
    if category.startswith("vehicle.motorcycle") or category.startswith("vehicle.bicycle"):
        return "cycle.without_rider" if track.parked else "cycle.with_rider"
    if category.startswith("vehicle."):
        if track.parked:
            return "vehicle.parked"
        return "vehicle.moving" if speed > 0.3 else "vehicle.stopped"
    if category.startswith("human.pedestrian"):
        return "pedestrian.moving" if speed > 0.2 else "pedestrian.standing"
    return None


def lidar_points(size_wlh, distance: float) -> int:
    """A plausible lidar hit count: proportional to visible area, falling with distance squared."""
    w, l, h = size_wlh
    area = (w * l + l * h + w * h) / 3.0
    return int(6000.0 * area / max(distance, 2.0) ** 2)


def distance_visibility(distance: float) -> str:
    """Fallback visibility token for data written without cameras (motion data): by distance."""
    return "4" if distance < 20 else "3" if distance < 35 else "2" if distance < 50 else "1"


def visibility_token(fraction: float) -> str:
    """nuScenes visibility level of a visible fraction: 1 = 0-40 %, 2 = 40-60 %, 3 = 60-80 %, 4 = 80-100 %."""
    return "4" if fraction >= 0.8 else "3" if fraction >= 0.6 else "2" if fraction >= 0.4 else "1"


def set_rendered_visibility(annotation: dict, seen: int, in_view: int) -> None:
    """Visibility from the rendered cameras: the fraction of the object's pixels (over all cameras)
    that nothing nearer hides. An object in view but wholly hidden gets no lidar points, so the
    devkit drops it from evaluation as it drops unseen objects of real data; an object outside
    every camera keeps its distance-based values (the lidar sees all around)."""
    if in_view == 0:
        return
    fraction = seen / in_view
    annotation["visibility"] = visibility_token(fraction)
    annotation["num_lidar_pts"] = int(math.ceil(annotation["num_lidar_pts"] * fraction)) if seen > 0 else 0
