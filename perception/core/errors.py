"""One base for every error a user can fix: the tools catch ``PerceptionError`` and exit 2 with its message.

Each subclass lives next to the code that raises it (config, datasets, images, checkpoints); its
message names the file, key or value and says what to do.
"""


class PerceptionError(Exception):
    """Bad input or a broken run set-up, reported to the user without a traceback."""


class ConfigError(PerceptionError, ValueError):
    """A config key or value that cannot work; the message names the key and what to set."""
