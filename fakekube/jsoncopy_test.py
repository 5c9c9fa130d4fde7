"""copy_json copies as copy.deepcopy does for what a write holds: equal, sharing nothing
mutable, and keeping the types of values that are not plain JSON."""

from __future__ import annotations

import collections
from typing import Any

from fakekube.jsoncopy import copy_json


def test_an_object_is_copied_all_the_way_down() -> None:
    original: dict[str, Any] = {"a": [1, 2.5, {"b": None, "c": [True, "x"]}], "d": {"e": {}}}
    copied = copy_json(original)
    assert copied == original
    copied["a"][2]["c"].append("y")
    copied["d"]["e"]["f"] = 1
    assert original == {"a": [1, 2.5, {"b": None, "c": [True, "x"]}], "d": {"e": {}}}


def test_values_that_are_not_plain_json_keep_their_types() -> None:
    inner = [1]
    original: dict[str, Any] = {"t": (inner, 2), "o": collections.OrderedDict(k=[3])}
    copied = copy_json(original)
    assert copied == original
    assert type(copied["t"]) is tuple and type(copied["o"]) is collections.OrderedDict
    assert copied["t"][0] is not inner and copied["o"]["k"] is not original["o"]["k"]
