"""Write a MapWorld as a nuScenes map-expansion JSON (version 1.3, every layer key present)."""

from __future__ import annotations

import hashlib
import math

import numpy as np
from shapely.geometry import Polygon

from perception.synthetic.paths import Piece
from perception.synthetic.world import LANE_WIDTH, ROAD_HALF_WIDTH, MapWorld

MAP_VERSION = "1.3"


class _Tables:
    """node / line / polygon tables with deterministic tokens."""

    def __init__(self, namespace: str):
        self.namespace = namespace
        self.count = 0
        self.node, self.line, self.polygon = [], [], []

    def token(self) -> str:
        self.count += 1
        return hashlib.md5(f"{self.namespace}:{self.count}".encode()).hexdigest()

    def nodes(self, points) -> list[str]:
        tokens = []
        for x, y in np.asarray(points)[:, :2]:
            token = self.token()
            self.node.append({"token": token, "x": float(x), "y": float(y)})
            tokens.append(token)
        return tokens

    def add_line(self, points) -> str:
        token = self.token()
        self.line.append({"token": token, "node_tokens": self.nodes(points)})
        return token

    def add_polygon(self, polygon: Polygon) -> str:
        polygon = polygon.buffer(0)
        exterior = np.asarray(polygon.exterior.coords)[:-1]
        holes = [{"node_tokens": self.nodes(np.asarray(h.coords)[:-1])} for h in polygon.interiors]
        token = self.token()
        self.polygon.append({"token": token, "exterior_node_tokens": self.nodes(exterior), "holes": holes})
        return token


def _piece_band(piece: Piece, inner: float, outer: float, spacing: float = 1.0) -> Polygon:
    count = max(int(math.ceil(piece.length / spacing)), 2)
    s = np.linspace(0, piece.length, count + 1)
    a, b = piece.offset(inner), piece.offset(outer)
    left = [a.pose_at(v * a.length / piece.length)[:2] for v in s]
    right = [b.pose_at(v * b.length / piece.length)[:2] for v in s]
    return Polygon(left + right[::-1])


def _pose(x, y, z, yaw) -> dict:
    return {"tx": float(x), "ty": float(y), "tz": float(z), "rx": 0.0, "ry": 0.0, "rz": float(yaw)}


def map_expansion_json(world: MapWorld) -> dict:
    t = _Tables(f"map:{world.location}")
    layers: dict = {name: [] for name in (
        "drivable_area", "road_segment", "road_block", "lane", "ped_crossing", "walkway", "stop_line",
        "carpark_area", "road_divider", "lane_divider", "traffic_light", "lane_connector")}
    arclines, connectivity = {}, {}

    drivable_polygons = list(getattr(world.drivable, "geoms", [world.drivable]))
    drivable_token = t.token()
    layers["drivable_area"].append(
        {"token": drivable_token, "polygon_tokens": [t.add_polygon(p) for p in drivable_polygons]})

    segment_tokens = []
    for piece in world.centerline.pieces:
        segment = t.token()
        layers["road_segment"].append({"token": segment, "polygon_token": t.add_polygon(
            _piece_band(piece, -ROAD_HALF_WIDTH, ROAD_HALF_WIDTH)), "is_intersection": False,
            "drivable_area_token": drivable_token})
        segment_tokens.append(segment)
        for side in (-1, 1):
            x0, y0, yaw0 = piece.start
            x1, y1, yaw1 = piece.end
            edge_from = t.add_line([(x0, y0), (x0 - side * ROAD_HALF_WIDTH * math.sin(yaw0),
                                               y0 + side * ROAD_HALF_WIDTH * math.cos(yaw0))])
            edge_to = t.add_line([(x1, y1), (x1 - side * ROAD_HALF_WIDTH * math.sin(yaw1),
                                             y1 + side * ROAD_HALF_WIDTH * math.cos(yaw1))])
            lo, hi = sorted((0.0, side * ROAD_HALF_WIDTH))
            layers["road_block"].append({"token": t.token(), "polygon_token": t.add_polygon(_piece_band(piece, lo, hi)),
                                         "from_edge_line_token": edge_from, "to_edge_line_token": edge_to,
                                         "road_segment_token": segment})

    for lane in world.lanes:
        tokens = [t.token() for _ in lane.path.pieces]
        for i, (token, piece) in enumerate(zip(tokens, lane.path.pieces)):
            layers["lane"].append({
                "token": token, "polygon_token": t.add_polygon(_piece_band(piece, -LANE_WIDTH / 2, LANE_WIDTH / 2)),
                "lane_type": "CAR", "from_edge_line_token": "", "to_edge_line_token": "",
                "left_lane_divider_segments": [], "right_lane_divider_segments": []})
            arclines[token] = [piece.to_arcline()]
            connectivity[token] = {"incoming": [tokens[i - 1]], "outgoing": [tokens[(i + 1) % len(tokens)]]}

    for crossing in world.ped_crossings:
        layers["ped_crossing"].append({"token": t.token(), "polygon_token": t.add_polygon(crossing),
                                       "road_segment_token": segment_tokens[0]})
    for walkway in world.walkways:
        for polygon in getattr(walkway, "geoms", [walkway]):
            layers["walkway"].append({"token": t.token(), "polygon_token": t.add_polygon(polygon)})
    layers["carpark_area"].append({"token": t.token(), "polygon_token": t.add_polygon(world.carpark),
                                   "orientation": 0.0, "road_block_token": ""})
    for line in world.road_dividers:
        layers["road_divider"].append({"token": t.token(), "line_token": t.add_line(line),
                                       "road_segment_token": segment_tokens[0]})
    for line in world.lane_dividers:
        line_token = t.add_line(line)
        nodes = next(r for r in t.line if r["token"] == line_token)["node_tokens"]
        layers["lane_divider"].append({"token": line_token + "d", "line_token": line_token, "lane_divider_segments": [
            {"node_token": n, "segment_type": "DOUBLE_DASHED_WHITE"} for n in nodes[:: max(len(nodes) // 20, 1)]]})

    light_tokens = []
    for light in world.traffic_lights:
        x, y, z = light.position
        ahead = (x + math.cos(light.yaw), y + math.sin(light.yaw))
        token = t.token()
        light_tokens.append(token)
        items = [{"color": color, "shape": "CIRCLE", "rel_pos": _pose(0.19, 0.0, dz, 0.0), "to_road_block_tokens": [],
                  "token": t.token()} for color, dz in (("RED", 0.34), ("YELLOW", 0.0), ("GREEN", -0.34))]
        layers["traffic_light"].append({"token": token, "line_token": t.add_line([(x, y), ahead]),
                                        "traffic_light_type": "VERTICAL", "from_road_block_token": "",
                                        "items": items, "pose": _pose(x, y, z, light.yaw)})
    for i, stop in enumerate(world.stop_lines):
        layers["stop_line"].append({"token": t.token(), "polygon_token": t.add_polygon(stop),
                                    "stop_line_type": "TRAFFIC_LIGHT", "ped_crossing_tokens": [],
                                    "traffic_light_tokens": [light_tokens[i]], "road_block_token": ""})

    return {"version": MAP_VERSION, "canvas_edge": [float(world.canvas_edge[0]), float(world.canvas_edge[1])],
            "polygon": t.polygon, "line": t.line, "node": t.node, **layers,
            "arcline_path_3": arclines, "connectivity": connectivity}
