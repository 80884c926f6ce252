"""Camera task specs: one file per task, one tuple of them. Adding a task: a new file here with a
``Task`` subclass (perception.tasks.base), its entry in ``CAMERA_TASKS``, configs and tests."""

from perception.tasks.base import ScoringContext, Task
from perception.tasks.drivable import DRIVABLE
from perception.tasks.lanes import LANES
from perception.tasks.lights import LIGHTS
from perception.tasks.obstacles import OBSTACLES

CAMERA_TASKS: tuple[Task, ...] = (DRIVABLE, OBSTACLES, LANES, LIGHTS)

__all__ = ["CAMERA_TASKS", "DRIVABLE", "LANES", "LIGHTS", "OBSTACLES", "ScoringContext", "Task"]
