"""Agents of one scene and their motion: vehicles follow lanes (car following, stopping at
red lights, speed changes), pedestrians walk along walkways, parked cars and road works stay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from perception.synthetic.world import ROAD_HALF_WIDTH, WALKWAY_WIDTH, MapWorld, nearest_arclength

# category: (mean size [w, l, h], share of moving vehicles)
VEHICLE_TYPES = {
    "vehicle.car": ((1.95, 4.6, 1.7), 0.62),
    "vehicle.truck": ((2.5, 7.5, 3.1), 0.10),
    "vehicle.bus.rigid": ((2.9, 11.0, 3.4), 0.06),
    "vehicle.trailer": ((2.6, 10.0, 3.6), 0.03),
    "vehicle.construction": ((2.8, 6.4, 3.2), 0.03),
    "vehicle.motorcycle": ((0.8, 2.1, 1.5), 0.08),
    "vehicle.bicycle": ((0.65, 1.8, 1.35), 0.08),
}
PEDESTRIAN_SIZE = (0.65, 0.7, 1.75)
CONE_SIZE = (0.42, 0.42, 0.75)
BARRIER_SIZE = (2.4, 0.5, 1.0)

SIM_DT = 0.1  # seconds per simulation step
WARMUP_S = 8.0


@dataclass
class Track:
    """One agent over the scene. poses [T,4] = (x, y, z_centre, yaw) global; speed [T] m/s."""

    category: str
    size_wlh: tuple[float, float, float]
    poses: np.ndarray
    speed: np.ndarray
    parked: bool = False
    is_ego: bool = False


def _jitter(size, rng, scale=0.08):
    return tuple(float(v * rng.uniform(1 - scale, 1 + scale)) for v in size)


def simulate_scene(world: MapWorld, rng: np.random.Generator, times: np.ndarray, ego_lane: int = 0) -> list[Track]:
    """Simulate every agent; ``times`` [T] are the keyframe times (s). Track 0 is the ego car."""
    tracks = _simulate_vehicles(world, rng, times, ego_lane)
    tracks += _simulate_pedestrians(world, rng, times)
    tracks += _static_objects(world, rng, len(times))
    tracks += _roadside_fleet(world, rng, tracks[0], len(times))
    return tracks


# Parked on both verges of the ego car's route (one row per side, packed around the middle of
# the stretch it drives) so that every scene holds every detection class within eval range.
ROADSIDE_FLEET = (
    ("vehicle.bus.rigid", "movable_object.trafficcone", "vehicle.truck", "vehicle.bicycle", "human.pedestrian.adult"),
    ("vehicle.trailer", "movable_object.barrier", "vehicle.construction", "vehicle.motorcycle", "vehicle.car"),
)


def _simulate_vehicles(world: MapWorld, rng, times, ego_lane) -> list[Track]:
    agents = []  # dicts: lane, s, v, v_des, amp, omega, phase, category, size
    for lane_index, lane in enumerate(world.lanes):
        s = float(rng.uniform(0, 20))
        while s < lane.path.length - 25:
            names = list(VEHICLE_TYPES)
            shares = np.array([VEHICLE_TYPES[n][1] for n in names])
            category = names[int(rng.choice(len(names), p=shares / shares.sum()))]
            size = _jitter(VEHICLE_TYPES[category][0], rng)
            cruise = {"vehicle.bicycle": 5.0, "vehicle.motorcycle": 11.0}.get(category, 10.0)
            agents.append(dict(lane=lane_index, s=s, v=cruise * 0.8, v_des=cruise * rng.uniform(0.75, 1.3),
                               amp=rng.uniform(0.1, 0.35), omega=rng.uniform(0.15, 0.5), phase=rng.uniform(0, 6.3),
                               category=category, size=size, ego=False))
            s += size[1] + rng.uniform(12, 45)
    # The ego car replaces a vehicle on its lane.
    candidates = [i for i, a in enumerate(agents) if a["lane"] == ego_lane and a["category"] == "vehicle.car"]
    ego = agents.pop(candidates[int(rng.integers(len(candidates)))] if candidates else 0)
    ego.update(ego=True, category="vehicle.car", size=(1.85, 4.1, 1.6), lane=ego_lane)
    agents.insert(0, ego)

    steps_per_frame = None
    start = times[0] - WARMUP_S
    n_steps = int(round((times[-1] - start) / SIM_DT)) + 1
    record_at = {int(round((t - start) / SIM_DT)): k for k, t in enumerate(times)}
    poses = np.zeros((len(agents), len(times), 4))
    speeds = np.zeros((len(agents), len(times)))
    del steps_per_frame
    for step in range(n_steps):
        t = start + step * SIM_DT
        by_lane: dict[int, list[int]] = {}
        for i, a in enumerate(agents):
            by_lane.setdefault(a["lane"], []).append(i)
        for lane_index, members in by_lane.items():
            lane = world.lanes[lane_index]
            length = lane.path.length
            order = sorted(members, key=lambda i: agents[i]["s"])
            for rank, i in enumerate(order):
                a = agents[i]
                leader = agents[order[(rank + 1) % len(order)]]
                gap = (leader["s"] - a["s"]) % length - (leader["size"][1] + a["size"][1]) / 2
                if len(order) == 1:
                    gap = 1e9
                for stop_s, light_index in zip(lane.stop_s, lane.light_index):
                    ahead = (stop_s - a["s"]) % length - a["size"][1] / 2
                    state = world.traffic_lights[light_index].state(t)
                    # Stop for red, and for yellow when there is room to stop.
                    if 0.5 < ahead < 60 and (state == "red" or (state == "yellow" and ahead > 15)):
                        gap = min(gap, ahead)
                desired = a["v_des"] * (1 + a["amp"] * math.sin(a["omega"] * t + a["phase"]))
                target = min(desired, max(0.0, (gap - 3.0) / 1.4))
                accel = float(np.clip((target - a["v"]) / 1.0, -5.0, 2.0))
                a["v"] = max(0.0, a["v"] + accel * SIM_DT)
                a["s"] = (a["s"] + a["v"] * SIM_DT) % length
        if step in record_at:
            k = record_at[step]
            for i, a in enumerate(agents):
                x, y, yaw = world.lanes[a["lane"]].path.pose_at(a["s"])
                poses[i, k] = (x, y, a["size"][2] / 2, yaw)
                speeds[i, k] = a["v"]
    tracks = [Track(a["category"], a["size"], poses[i], speeds[i], is_ego=a["ego"]) for i, a in enumerate(agents)]
    return tracks


def _simulate_pedestrians(world: MapWorld, rng, times) -> list[Track]:
    tracks = []
    centre = world.centerline
    for side in (-1, 1):
        lateral = side * (ROAD_HALF_WIDTH + WALKWAY_WIDTH / 2)
        path = centre.offset(lateral)
        count = int(path.length / 35)
        for _ in range(count):
            s0 = rng.uniform(0, path.length)
            direction = 1 if rng.random() < 0.5 else -1
            speed = 0.0 if rng.random() < 0.25 else rng.uniform(0.9, 1.7)
            drift = rng.uniform(-0.9, 0.9)
            size = _jitter(PEDESTRIAN_SIZE, rng, 0.1)
            poses = np.zeros((len(times), 4))
            for k, t in enumerate(times):
                s = s0 + direction * speed * (t - times[0])
                x, y, yaw = path.pose_at(s)
                offset = drift * math.sin(0.2 * t)
                x, y = x - offset * math.sin(yaw), y + offset * math.cos(yaw)
                poses[k] = (x, y, size[2] / 2, yaw if direction == 1 else yaw + math.pi)
            tracks.append(Track("human.pedestrian.adult", size, poses, np.full(len(times), speed)))
    return tracks


def _roadside_fleet(world: MapWorld, rng, ego: Track, n_times: int) -> list[Track]:
    centre = world.centerline
    s_middle = nearest_arclength(centre, ego.poses[len(ego.poses) // 2, :2])
    sizes = {"movable_object.trafficcone": CONE_SIZE, "movable_object.barrier": BARRIER_SIZE,
             "human.pedestrian.adult": PEDESTRIAN_SIZE}
    tracks = []
    for side, row in zip((-1, 1), ROADSIDE_FLEET):
        row = [row[i] for i in rng.permutation(len(row))]
        row_sizes = [_jitter(sizes.get(c) or VEHICLE_TYPES[c][0], rng) for c in row]
        gap = 1.5
        length = sum(max(size[:2]) for size in row_sizes) + gap * (len(row) - 1)
        s = s_middle - length / 2
        for category, size in zip(row, row_sizes):
            extent = max(size[:2])  # room along the road whichever way the box is turned
            lateral = side * (ROAD_HALF_WIDTH + WALKWAY_WIDTH + 0.6 + min(size[:2]) / 2)
            x, y, yaw = centre.pose_at(s + extent / 2)  # arclength on the centre line, then offset sideways
            x, y = x - lateral * math.sin(yaw), y + lateral * math.cos(yaw)
            pose = np.array([x, y, size[2] / 2, yaw + (math.pi if rng.random() < 0.5 else 0.0)])
            tracks.append(Track(category, size, np.tile(pose, (n_times, 1)), np.zeros(n_times), parked=True))
            s += extent + gap
    return tracks


def _static_objects(world: MapWorld, rng, n_times: int) -> list[Track]:
    tracks = []
    for x, y, yaw in world.carpark_slots:
        if rng.random() < 0.6:
            size = _jitter(VEHICLE_TYPES["vehicle.car"][0], rng)
            pose = np.array([x, y, size[2] / 2, yaw + rng.uniform(-0.05, 0.05)])
            tracks.append(Track("vehicle.car", size, np.tile(pose, (n_times, 1)), np.zeros(n_times), parked=True))
    centre = world.centerline
    for _ in range(3):  # road works: a row of cones on a lane edge, barriers on the walkway edge
        s0 = rng.uniform(0, centre.length)
        side = -1 if rng.random() < 0.5 else 1
        for j in range(6):
            x, y, yaw = centre.offset(side * (ROAD_HALF_WIDTH - 0.5)).pose_at(s0 + 3.0 * j)
            pose = np.array([x, y, CONE_SIZE[2] / 2, yaw])
            tracks.append(Track("movable_object.trafficcone", _jitter(CONE_SIZE, rng, 0.05),
                                np.tile(pose, (n_times, 1)), np.zeros(n_times)))
        for j in range(3):
            x, y, yaw = centre.offset(side * (ROAD_HALF_WIDTH + 0.4)).pose_at(s0 + 2.6 * j)
            pose = np.array([x, y, BARRIER_SIZE[2] / 2, yaw])
            tracks.append(Track("movable_object.barrier", _jitter(BARRIER_SIZE, rng, 0.05),
                                np.tile(pose, (n_times, 1)), np.zeros(n_times)))
    return tracks
