"""The prediction-challenge agent list of a dataset, chosen the way the nuScenes challenge does.

nuScenes ships ``maps/prediction/prediction_scenes.json`` = {scene name: ["<instance>_<sample>"]};
the devkit's ``get_prediction_challenge_split`` reads it. Our synthetic writer writes the same
file: every moving vehicle annotation with the full future horizon annotated and enough past
to estimate its velocity.
"""

from __future__ import annotations

FUTURE_KEYFRAMES = 12  # 6 s at 2 Hz, the challenge horizon
PAST_KEYFRAMES = 2  # >= 1 s of history: the devkit's velocity / acceleration need two previous annotations


def prediction_scenes(tables: dict[str, list[dict]]) -> dict[str, list[str]]:
    categories = {c["token"]: c["name"] for c in tables["category"]}
    attributes = {a["token"]: a["name"] for a in tables["attribute"]}
    instance_category = {i["token"]: categories[i["category_token"]] for i in tables["instance"]}
    annotations = {a["token"]: a for a in tables["sample_annotation"]}
    scene_of_sample = {s["token"]: s["scene_token"] for s in tables["sample"]}
    scene_name = {s["token"]: s["name"] for s in tables["scene"]}

    def chain_length(annotation: dict, direction: str, limit: int) -> int:
        count = 0
        while annotation[direction] and count < limit:
            annotation = annotations[annotation[direction]]
            count += 1
        return count

    selected: dict[str, list[str]] = {s["name"]: [] for s in tables["scene"]}
    for annotation in tables["sample_annotation"]:
        if not instance_category[annotation["instance_token"]].startswith("vehicle."):
            continue
        if any(attributes[t] in ("vehicle.parked", "cycle.without_rider") for t in annotation["attribute_tokens"]):
            continue
        if chain_length(annotation, "next", FUTURE_KEYFRAMES) < FUTURE_KEYFRAMES:
            continue
        if chain_length(annotation, "prev", PAST_KEYFRAMES) < PAST_KEYFRAMES:
            continue
        name = scene_name[scene_of_sample[annotation["sample_token"]]]
        selected[name].append(f"{annotation['instance_token']}_{annotation['sample_token']}")
    return selected
