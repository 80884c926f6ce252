"""Drivable-area labels for a camera image from the map expansion, under the flat-ground assumption.

Each pixel's viewing ray is intersected with the ground plane at the ego vehicle's height;
the hit point is looked up in a local raster of the map's drivable_area polygons. Pixels
whose ray stays above the horizon are "not drivable" (sky, buildings); ground points farther
than ``max_range`` are IGNORE, since the flat-ground assumption and the map alignment are
not trusted there.
"""

from __future__ import annotations

import cv2
import numpy as np
from shapely.geometry import box as shapely_box

from perception.geometry import pixel_rays, rays_to_ground

IGNORE_INDEX = 255
RASTER_RESOLUTION = 0.1  # metres per cell of the local map raster
_SHIFT = 3


class DrivableRasterizer:
    """Local rasters of the drivable_area layer of one NuScenesMap, polygons cached by token."""

    def __init__(self, nusc_map):
        self.nusc_map = nusc_map
        self._polygons: dict[str, object] = {}

    def polygons_near(self, x_min: float, y_min: float, x_max: float, y_max: float) -> list:
        records = self.nusc_map.get_records_in_patch((x_min, y_min, x_max, y_max), ["drivable_area"], mode="intersect")
        polygons = []
        for record_token in records["drivable_area"]:
            record = self.nusc_map.get("drivable_area", record_token)
            for token in record["polygon_tokens"]:
                if token not in self._polygons:
                    self._polygons[token] = self.nusc_map.extract_polygon(token)
                polygons.append(self._polygons[token])
        return polygons

    def local_raster(self, centre_xy, half_size: float) -> tuple[np.ndarray, np.ndarray]:
        """Boolean raster [N,N] (row = y, col = x, origin at the returned (x_min, y_min))."""
        x_min, y_min = centre_xy[0] - half_size, centre_xy[1] - half_size
        size = int(np.ceil(2 * half_size / RASTER_RESOLUTION))
        raster = np.zeros((size, size), np.uint8)
        patch = shapely_box(x_min, y_min, x_min + 2 * half_size, y_min + 2 * half_size)
        origin = np.array([x_min, y_min])
        for polygon in self.polygons_near(x_min, y_min, x_min + 2 * half_size, y_min + 2 * half_size):
            clipped = polygon.intersection(patch)
            for part in getattr(clipped, "geoms", [clipped]):
                if part.is_empty or part.geom_type != "Polygon":
                    continue
                cv2.fillPoly(raster, [_grid(part.exterior.coords, origin)], 1, shift=_SHIFT)
                for hole in part.interiors:
                    cv2.fillPoly(raster, [_grid(hole.coords, origin)], 0, shift=_SHIFT)
        return raster.astype(bool), origin


def _grid(coords, origin) -> np.ndarray:
    return np.round((np.asarray(coords)[:, :2] - origin) / RASTER_RESOLUTION * (1 << _SHIFT)).astype(np.int32)


def project_drivable_mask(rasterizer: DrivableRasterizer, intrinsics: np.ndarray, global_from_camera: np.ndarray,
                          ground_z: float, width: int, height: int, max_range: float = 60.0) -> np.ndarray:
    """uint8 mask [H,W] at the image's resolution: 1 drivable, 0 not, IGNORE_INDEX unknown."""
    rays = pixel_rays(intrinsics, height, width)
    points, t = rays_to_ground(rays, global_from_camera, ground_z=ground_z)
    camera_xy = global_from_camera[:2, 3]
    distance = np.linalg.norm(points[..., :2] - camera_xy, axis=-1)
    hits = (t > 0) & (distance <= max_range)
    mask = np.zeros((height, width), np.uint8)
    mask[(t > 0) & ~hits] = IGNORE_INDEX
    if hits.any():
        raster, origin = rasterizer.local_raster(camera_xy, max_range + 1.0)
        cells = np.floor((points[hits][:, :2] - origin) / RASTER_RESOLUTION).astype(np.int64)
        cells = np.clip(cells, 0, raster.shape[0] - 1)
        mask[hits] = raster[cells[:, 1], cells[:, 0]].astype(np.uint8)
    return mask
