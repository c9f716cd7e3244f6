"""The one wall clock the handlers read; plain functions take `now` as an argument, so tests
and the emulation can move time without sleeping."""

import time
from collections.abc import Callable

now: Callable[[], float] = time.time
