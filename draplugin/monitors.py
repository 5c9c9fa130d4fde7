"""The monitor on a connector (`libdisplay.compositor.outputs.read_monitor`), decoded once per
distinct read of its connector.

One hotplug decodes every connected monitor's EDID several times over: the slice's attributes,
each Display pass's status (two passes: after the slice, after the outputs followed), and the
driver's derivation of the outputs. The EDIDs themselves rarely change. A `Connector` is a
frozen value of what sysfs showed (EDID bytes, modes, status) and the `Monitor` decoded from
it is frozen too, so equal reads share one decode. Bounded by MAX_CACHED: a card has at most
64 devices in its slice, and a swapped monitor is a new value that pushes the oldest out.
"""

from __future__ import annotations

import functools
from typing import Final

from libdisplay.compositor import outputs
from libdisplay.compositor.outputs import Monitor
from libdisplay.hardware.drm import Connector

MAX_CACHED: Final = 128


@functools.lru_cache(maxsize=MAX_CACHED)
def read_monitor(connector: Connector) -> Monitor:
    """`outputs.read_monitor(connector)`, from the cache when an equal connector was read."""
    return outputs.read_monitor(connector)
