"""A Python model of the DisplayConfig parameter rules of the claim admission policy.

The policy (deploy/base/cluster/admission-claim-parameters.yaml) states the rules in CEL,
which nothing here can evaluate. This model states them again so tests can run good and bad
parameter sets through them; admission_test.py holds the two to each other by comparing the
literals the CEL uses (field names, enums, the mode pattern, the bounds) with the ones below.
The rule names are the policy's variable names, and the model follows CEL's typing: a JSON
`true` is a bool, not an int, and `4.0` is a double.
"""

from __future__ import annotations

import re
from typing import Any

from draplugin.driver.claimconfig import INPUTS, POWER_STATES

API_VERSION = "display.liken.sh/v1alpha1"
KIND = "DisplayConfig"
FIELDS = (
    "apiVersion", "kind", "mode", "transform", "scale", "brightness", "contrast", "input", "power",
)  # fmt: skip
MODE_PATTERN = r"^(preferred|[1-9][0-9]{0,4}x[1-9][0-9]{0,4}i?(@[0-9]{1,3}([.][0-9]{1,3})?)?)$"
TRANSFORMS = (
    "normal",
    "rotate-90",
    "rotate-180",
    "rotate-270",
    "flipped",
    "flipped-rotate-90",
    "flipped-rotate-180",
    "flipped-rotate-270",
)
# The driver's names, stated once there: admission must accept every value the driver does.
POWER = POWER_STATES
# Inclusive integer bounds.
RANGES = {"scale": (1, 4), "brightness": (0, 100), "contrast": (0, 100)}
# Any case of the driver's input source names (MCCS VCP 0x60), as CEL's RE2 `matches` reads it.
INPUT_PATTERN = f"(?i)^({'|'.join(INPUTS)})$"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_string(value: object) -> bool:
    return isinstance(value, str)


def violations(params: Any) -> list[str]:
    """The names of the rules one parameters object breaks, in the policy's order."""
    if not isinstance(params, dict):
        return ["notObjects"]
    broken = []
    if params.get("apiVersion") != API_VERSION or params.get("kind") != KIND:
        broken.append("badIdentity")
    if set(params) - set(FIELDS):
        broken.append("unknownFields")
    if "mode" in params and not (
        _is_string(params["mode"]) and re.fullmatch(MODE_PATTERN, params["mode"])
    ):
        broken.append("badMode")
    if "transform" in params and not (
        _is_string(params["transform"]) and params["transform"] in TRANSFORMS
    ):
        broken.append("badTransform")
    for field, (low, high) in RANGES.items():
        if field in params and not (_is_int(params[field]) and low <= params[field] <= high):
            broken.append(f"bad{field.capitalize()}")
    if "input" in params and not (
        _is_string(params["input"]) and re.search(INPUT_PATTERN, params["input"])
    ):
        broken.append("badInput")
    if "power" in params and not (_is_string(params["power"]) and params["power"] in POWER):
        broken.append("badPower")
    return broken
