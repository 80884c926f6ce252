"""The static world of one map location: a looping road with lanes, walkways, a car park,
pedestrian crossings with stop lines and traffic lights. All geometry in the global frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from shapely.geometry import LineString, Polygon, box
from shapely.ops import unary_union

from perception.synthetic.paths import LoopPath, Piece, rounded_rectangle

LANE_WIDTH = 3.5
LANES_PER_DIRECTION = 2
ROAD_HALF_WIDTH = LANE_WIDTH * LANES_PER_DIRECTION  # 7 m from the centre line to the road edge
WALKWAY_WIDTH = 3.0
MAP_MARGIN = 60.0

# Traffic light cycle (seconds): green, yellow, red.
LIGHT_CYCLE = (12.0, 3.0, 9.0)
LIGHT_STATES = ("green", "yellow", "red")


@dataclass
class Lane:
    path: LoopPath
    direction: int  # +1 travels with the centre line (counter-clockwise), -1 against it
    lateral: float  # offset of the lane centre from the road centre line, left positive
    stop_s: list[float] = field(default_factory=list)  # arclengths of stop lines on this lane
    light_index: list[int] = field(default_factory=list)


@dataclass
class TrafficLight:
    position: np.ndarray  # [3] housing centre, global frame
    yaw: float  # direction the lamps face (towards approaching traffic)
    phase: float  # seconds into the cycle at t = 0

    def state(self, time_s: float) -> str:
        t = (time_s + self.phase) % sum(LIGHT_CYCLE)
        if t < LIGHT_CYCLE[0]:
            return "green"
        if t < LIGHT_CYCLE[0] + LIGHT_CYCLE[1]:
            return "yellow"
        return "red"


@dataclass
class MapWorld:
    location: str
    drive_on_left: bool
    centerline: LoopPath
    lanes: list[Lane]
    road: Polygon
    carpark: Polygon
    drivable: Polygon
    walkways: list[Polygon]
    lane_dividers: list[np.ndarray]  # polylines [N,2]
    road_dividers: list[np.ndarray]
    road_edges: list[np.ndarray]
    stop_lines: list[Polygon]
    ped_crossings: list[Polygon]
    traffic_lights: list[TrafficLight]
    carpark_slots: list[tuple[float, float, float]]  # (x, y, yaw) parking spots
    canvas_edge: tuple[float, float]


def _band(path: LoopPath, inner: float, outer: float, spacing: float = 1.0) -> Polygon:
    """Polygon between two parallel offsets of a closed path (a ring)."""
    ring_outer = path.offset(outer).sample(spacing)
    ring_inner = path.offset(inner).sample(spacing)
    if outer > inner:
        return Polygon(ring_inner).symmetric_difference(Polygon(ring_outer)).buffer(0)
    return Polygon(ring_outer).symmetric_difference(Polygon(ring_inner)).buffer(0)


def nearest_arclength(path: LoopPath, point: np.ndarray, spacing: float = 0.5) -> float:
    """Arclength s of the path sample (every ~``spacing`` m) closest to ``point`` [2+]."""
    samples = path.sample(spacing)
    index = int(np.argmin(np.linalg.norm(samples - point[None, :2], axis=1)))
    return index * path.length / (len(samples) - 1)


def build_world(location: str, rng: np.random.Generator) -> MapWorld:
    drive_on_left = location.startswith("singapore")
    width, height = rng.uniform(240, 330), rng.uniform(170, 240)
    radii = tuple(float(r) for r in rng.uniform(22, 60, size=4))
    bump = (float(rng.uniform(35, 60)), float(rng.uniform(0.25, 0.45)))
    origin = (MAP_MARGIN, MAP_MARGIN)
    centerline = rounded_rectangle(origin, width, height, radii, bump=bump)
    canvas = (width + 2 * MAP_MARGIN, height + 2 * MAP_MARGIN)

    # Lanes travelling counter-clockwise lie right of the centre line for right-hand traffic.
    ccw_side = 1.0 if drive_on_left else -1.0
    lanes = []
    for direction in (1, -1):
        for index in range(LANES_PER_DIRECTION):
            lateral = direction * ccw_side * LANE_WIDTH * (index + 0.5)
            path = centerline.offset(lateral)
            lanes.append(Lane(path if direction == 1 else path.reversed(), direction, lateral))

    road = _band(centerline, -ROAD_HALF_WIDTH, ROAD_HALF_WIDTH)
    walk_inner = _band(centerline, -ROAD_HALF_WIDTH - WALKWAY_WIDTH, -ROAD_HALF_WIDTH)
    walk_outer = _band(centerline, ROAD_HALF_WIDTH, ROAD_HALF_WIDTH + WALKWAY_WIDTH)

    # Car park outside the loop beside the first (bottom) straight, joined by a driveway.
    bottom = centerline.pieces[0]
    x_mid = bottom.start[0] + bottom.length * rng.uniform(0.3, 0.7)
    y_road = bottom.start[1]
    park_depth, park_length = 22.0, 44.0
    carpark = box(x_mid - park_length / 2, y_road - ROAD_HALF_WIDTH - WALKWAY_WIDTH - park_depth,
                  x_mid + park_length / 2, y_road - ROAD_HALF_WIDTH - WALKWAY_WIDTH)
    driveway = box(x_mid - 4, y_road - ROAD_HALF_WIDTH - WALKWAY_WIDTH - 0.5, x_mid + 4, y_road - ROAD_HALF_WIDTH + 0.5)
    walk_inner = walk_inner.difference(driveway)
    drivable = unary_union([road, carpark, driveway]).buffer(0)
    slots = []
    for row, y in enumerate((carpark.bounds[1] + 3.5, carpark.bounds[3] - 3.5)):
        for x in np.arange(carpark.bounds[0] + 2.0, carpark.bounds[2] - 1.0, 3.0):
            slots.append((float(x), float(y), math.pi / 2 if row == 0 else -math.pi / 2))

    lane_dividers, road_dividers, road_edges = [], [], []
    for side in (-1, 1):
        for index in range(1, LANES_PER_DIRECTION):
            lane_dividers.append(centerline.offset(side * LANE_WIDTH * index).sample(1.0))
        road_edges.append(centerline.offset(side * ROAD_HALF_WIDTH).sample(1.0))
    road_dividers.append(centerline.sample(1.0))

    # Pedestrian crossings with lights in the middle of the two longest straights.
    straights = sorted(
        [(p.length, i) for i, p in enumerate(centerline.pieces) if p.curvature == 0 and p.length > 60], reverse=True
    )[:2]
    stop_lines, crossings, lights = [], [], []
    for _, piece_index in straights:
        piece: Piece = centerline.pieces[piece_index]
        s_mid = piece.length * rng.uniform(0.35, 0.65)
        phase = float(rng.uniform(0, sum(LIGHT_CYCLE)))
        x, y, yaw = piece.pose_at(s_mid)
        forward = np.array([math.cos(yaw), math.sin(yaw)])
        left = np.array([-math.sin(yaw), math.cos(yaw)])
        centre = np.array([x, y])
        crossings.append(_oriented_rect(centre, forward, left, 2.0, ROAD_HALF_WIDTH))
        for direction in (1, -1):
            travel = forward * direction
            lane_side = left * direction * ccw_side  # where this direction's lanes are
            stop_centre = centre - travel * 4.0 + lane_side * ROAD_HALF_WIDTH / 2
            stop_lines.append(_oriented_rect(stop_centre, travel, lane_side, 0.25, ROAD_HALF_WIDTH / 2))
            pole = centre - travel * 3.0 + lane_side * (ROAD_HALF_WIDTH + 0.8)
            facing = math.atan2(-travel[1], -travel[0])
            lights.append(TrafficLight(np.array([pole[0], pole[1], 4.6]), facing, phase))
            for lane in lanes:
                if lane.direction == direction:
                    lane.stop_s.append(nearest_arclength(lane.path, stop_centre))
                    lane.light_index.append(len(lights) - 1)

    return MapWorld(
        location=location, drive_on_left=drive_on_left, centerline=centerline, lanes=lanes, road=road,
        carpark=carpark, drivable=drivable, walkways=[walk_inner, walk_outer], lane_dividers=lane_dividers,
        road_dividers=road_dividers, road_edges=road_edges, stop_lines=stop_lines, ped_crossings=crossings,
        traffic_lights=lights, carpark_slots=slots, canvas_edge=canvas,
    )


def _oriented_rect(centre, axis_a, axis_b, half_a: float, half_b: float) -> Polygon:
    corners = [centre + sa * half_a * axis_a + sb * half_b * axis_b for sa, sb in ((1, 1), (-1, 1), (-1, -1), (1, -1))]
    return Polygon(corners)


def line_string(points: np.ndarray) -> LineString:
    return LineString(points)
