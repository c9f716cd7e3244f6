"""Environment variables set for a while, then put back as they were."""

import os
from collections.abc import Mapping


class EnvironOverride:
    """Sets variables in `os.environ`; `restore` gives each its earlier value, or unsets it
    where it was unset. Safe to restore twice."""

    def __init__(self) -> None:
        self._saved: dict[str, str | None] = {}

    def set(self, values: Mapping[str, str]) -> None:
        for key, value in values.items():
            # The first value seen is the one to restore, however often a key is set.
            self._saved.setdefault(key, os.environ.get(key))
            os.environ[key] = value

    def restore(self) -> None:
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved.clear()
