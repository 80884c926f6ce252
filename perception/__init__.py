"""perception: multi-task camera perception for driving data."""

__version__ = "0.1.0"
