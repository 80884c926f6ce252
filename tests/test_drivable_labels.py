"""Drivable masks projected from the map expansion agree with the map's polygons."""

from __future__ import annotations

import numpy as np
import pytest
from nuscenes.map_expansion.map_api import NuScenesMap
from shapely import contains_xy
from shapely.ops import unary_union

from perception.core.geometry import pixel_rays, rays_to_ground
from perception.data.drivable_projection import IGNORE_INDEX
from perception.data.label_cache import build_label_cache, load_label_cache
from perception.data.mask_codec import read_mask


@pytest.mark.extended  # 20 s
def test_projected_mask_agrees_with_map_polygons(small_dataset, tmp_path):
    cameras = ["CAM_FRONT", "CAM_BACK_LEFT"]
    directory = build_label_cache(small_dataset, "v1.0-trainval", "synthetic_val", cameras, str(tmp_path),
                                  drivable_max_range=40.0, verbose=False)
    infos, _ = load_label_cache(small_dataset, "v1.0-trainval", "synthetic_val", cameras, str(tmp_path), 40.0)
    assert len(infos) == 4 * len(cameras)
    assert len({info["location"] for info in infos}) == 1
    nusc_map = NuScenesMap(dataroot=small_dataset, map_name=infos[0]["location"])
    drivable = unary_union([nusc_map.extract_polygon(t) for r in nusc_map.drivable_area for t in r["polygon_tokens"]])
    checked = agreed = 0
    for info in infos:
        width, height = info["image_size"]
        mask = read_mask(f"{directory}/{info['drivable_mask']}", height, width)
        width, height = info["image_size"]
        assert mask.shape == (height, width)
        assert set(np.unique(mask)) <= {0, 1, IGNORE_INDEX}
        global_from_camera = np.asarray(info["global_from_ego"]) @ np.asarray(info["ego_from_camera"])
        points, t = rays_to_ground(pixel_rays(np.asarray(info["intrinsics"]), height, width), global_from_camera)
        on_ground = (t > 0) & (mask != IGNORE_INDEX)
        inside = contains_xy(drivable, points[on_ground][:, 0], points[on_ground][:, 1])
        agreed += int(np.count_nonzero(inside == (mask[on_ground] == 1)))
        checked += int(np.count_nonzero(on_ground))
        # Sky is never drivable and far ground is ignored, not guessed.
        assert np.all(mask[t <= 0] == 0)
    assert checked > 10000
    assert agreed / checked > 0.995  # disagreement only on raster edge cells
