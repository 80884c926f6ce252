"""Names fixed by nuScenes: cameras, categories, attributes and the detection classes."""

CAMERAS = (
    "CAM_FRONT",
    "CAM_FRONT_RIGHT",
    "CAM_BACK_RIGHT",
    "CAM_BACK",
    "CAM_BACK_LEFT",
    "CAM_FRONT_LEFT",
)

# The 10 classes of the nuScenes detection challenge, in the devkit's order.
DETECTION_CLASSES = (
    "car",
    "truck",
    "bus",
    "trailer",
    "construction_vehicle",
    "pedestrian",
    "motorcycle",
    "bicycle",
    "traffic_cone",
    "barrier",
)

# General nuScenes category -> detection class (the devkit's category_to_detection_name).
CATEGORY_TO_DETECTION = {
    "movable_object.barrier": "barrier",
    "vehicle.bicycle": "bicycle",
    "vehicle.bus.bendy": "bus",
    "vehicle.bus.rigid": "bus",
    "vehicle.car": "car",
    "vehicle.construction": "construction_vehicle",
    "vehicle.motorcycle": "motorcycle",
    "human.pedestrian.adult": "pedestrian",
    "human.pedestrian.child": "pedestrian",
    "human.pedestrian.construction_worker": "pedestrian",
    "human.pedestrian.police_officer": "pedestrian",
    "movable_object.trafficcone": "traffic_cone",
    "vehicle.trailer": "trailer",
    "vehicle.truck": "truck",
}

# All 23 v1.0 categories (name, description), as in category.json.
CATEGORIES = (
    ("animal", "All animals, e.g. cats, rats, dogs, deer, birds."),
    ("human.pedestrian.adult", "Adult subcategory."),
    ("human.pedestrian.child", "Child subcategory."),
    ("human.pedestrian.construction_worker", "Construction worker"),
    ("human.pedestrian.personal_mobility", "A small electric or self-propelled vehicle."),
    ("human.pedestrian.police_officer", "Police officer."),
    ("human.pedestrian.stroller", "Strollers."),
    ("human.pedestrian.wheelchair", "Wheelchairs."),
    ("movable_object.barrier", "Temporary road barrier placed in the scene."),
    ("movable_object.debris", "Movable object that is left on the driveable surface."),
    ("movable_object.pushable_pullable", "Objects that a pedestrian may push or pull."),
    ("movable_object.trafficcone", "All types of traffic cone."),
    ("static_object.bicycle_rack", "Area or device intended to park or secure the bicycles."),
    ("vehicle.bicycle", "Human or electric powered 2-wheeled vehicle designed to travel at lower speeds."),
    ("vehicle.bus.bendy", "Bendy bus subcategory."),
    ("vehicle.bus.rigid", "Rigid bus subcategory."),
    ("vehicle.car", "Vehicle designed primarily for personal use."),
    ("vehicle.construction", "Vehicles primarily designed for construction."),
    ("vehicle.emergency.ambulance", "All types of ambulances."),
    ("vehicle.emergency.police", "All types of police vehicles."),
    ("vehicle.motorcycle", "Gasoline or electric powered 2-wheeled vehicle."),
    ("vehicle.trailer", "Any vehicle trailer."),
    ("vehicle.truck", "Vehicles primarily designed to haul cargo."),
)

ATTRIBUTES = (
    ("vehicle.moving", "Vehicle is moving."),
    ("vehicle.stopped", "Vehicle, with a driver/rider in/on it, is currently stationary."),
    ("vehicle.parked", "Vehicle is stationary (usually for longer duration) with no immediate intent to move."),
    ("cycle.with_rider", "There is a rider on the bicycle or motorcycle."),
    ("cycle.without_rider", "There is NO rider on the bicycle or motorcycle."),
    ("pedestrian.sitting_lying_down", "The human is sitting or lying down."),
    ("pedestrian.standing", "The human is standing."),
    ("pedestrian.moving", "The human is moving."),
)

VISIBILITY_LEVELS = (
    ("1", "v0-40", "visibility of whole object is between 0 and 40%"),
    ("2", "v40-60", "visibility of whole object is between 40 and 60%"),
    ("3", "v60-80", "visibility of whole object is between 60 and 80%"),
    ("4", "v80-100", "visibility of whole object is between 80 and 100%"),
)

MAP_LOCATIONS = ("singapore-onenorth", "singapore-hollandvillage", "singapore-queenstown", "boston-seaport")
