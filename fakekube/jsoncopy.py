"""Deep copies of JSON values, for the copies every write makes (the body checked, the object
merged, the object stored).

`copy.deepcopy` keeps a memo of every object it visits, for shared and cyclic references a
decoded JSON body never has; for an 8-device ResourceSlice it costs about twice this walk. A
value of any other type than dict, list, str, int, float, bool or None (a tuple or a dict
subclass an in-process caller passed) is handed to `copy.deepcopy`, so the copy has the same
types as the original. Unlike `copy.deepcopy`, a dict or list referenced twice is copied twice.
"""

from __future__ import annotations

import copy
from typing import Any, TypeVar, cast

T = TypeVar("T")
_SCALARS = frozenset({str, int, float, bool, type(None)})


def copy_json(value: T) -> T:
    return cast(T, _copy(value))


def _copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in _SCALARS else _copy(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _SCALARS else _copy(v) for v in value]
    if kind in _SCALARS:
        return value
    return copy.deepcopy(value)
