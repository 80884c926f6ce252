"""Drivable-area labels for a camera image from the map expansion, under the flat-ground assumption.

Each pixel's viewing ray is intersected with the ground plane at the ego vehicle's height;
the hit point is looked up in a local raster of the map's drivable_area polygons. Pixels
whose ray stays above the horizon are "not drivable" (sky, buildings); ground points farther
than ``max_range`` are IGNORE, since the flat-ground assumption and the map alignment are
not trusted there.
"""

from __future__ import annotations

import functools

import numpy as np
from shapely.geometry import box as shapely_box

from perception.core.geometry import pixel_rays, polygon_mask, rays_to_ground

IGNORE_INDEX = 255
RASTER_RESOLUTION = 0.1  # metres per cell of the local map raster


class DrivableRasterizer:
    """Local rasters of the drivable_area layer of one NuScenesMap.

    Every drivable polygon is extracted once; the devkit's ``get_records_in_patch`` would
    extract them again on every query (it was a fifth of the label-cache build time).
    """

    def __init__(self, nusc_map):
        self.nusc_map = nusc_map
        self._polygons: list | None = None

    def polygons_near(self, x_min: float, y_min: float, x_max: float, y_max: float) -> list:
        if self._polygons is None:
            self._polygons = [self.nusc_map.extract_polygon(token) for record in self.nusc_map.drivable_area
                              for token in record["polygon_tokens"]]
        patch = shapely_box(x_min, y_min, x_max, y_max)
        return [polygon for polygon in self._polygons if polygon.intersects(patch)]

    def local_raster(self, centre_xy, half_size: float) -> tuple[np.ndarray, np.ndarray]:
        """Boolean raster [N,N] (row = y, col = x, origin at the returned (x_min, y_min))."""
        x_min, y_min = centre_xy[0] - half_size, centre_xy[1] - half_size
        size = int(np.ceil(2 * half_size / RASTER_RESOLUTION))
        patch = shapely_box(x_min, y_min, x_min + 2 * half_size, y_min + 2 * half_size)
        origin = np.array([x_min, y_min])
        clipped = [polygon.intersection(patch) for polygon in self.polygons_near(*patch.bounds)]
        return polygon_mask((size, size), clipped, origin, RASTER_RESOLUTION), origin


@functools.lru_cache(maxsize=8)
def _camera_rays(intrinsics_bytes: bytes, height: int, width: int) -> np.ndarray:
    """pixel_rays of one camera [H,W,3], read-only: a rig's few cameras are projected again and again."""
    rays = pixel_rays(np.frombuffer(intrinsics_bytes, np.float64).reshape(3, 3), height, width)
    rays.flags.writeable = False
    return rays


def project_drivable_mask(rasterizer: DrivableRasterizer, intrinsics: np.ndarray, global_from_camera: np.ndarray,
                          ground_z: float, width: int, height: int, max_range: float = 60.0) -> np.ndarray:
    """uint8 mask [H,W] at the image's resolution: 1 drivable, 0 not, IGNORE_INDEX unknown."""
    rays = _camera_rays(np.asarray(intrinsics, np.float64).tobytes(), height, width)
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
