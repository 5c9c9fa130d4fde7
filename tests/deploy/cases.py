"""Parameter sets and ResourceSlice writes that the admission policies must accept or reject.

Shared by the model tests (admission_test.py) and the CEL evaluation (cel_eval_test.py), so
both judge the same cases. Each BAD case names the policy variables (rules) it breaks.
"""

from __future__ import annotations

from typing import Any

from tests.deploy import displayconfig

NODE_CLAIM = "authentication.kubernetes.io/node-name"
DRIVER = "display.liken.sh"

BASE = {"apiVersion": displayconfig.API_VERSION, "kind": displayconfig.KIND}
GOOD = {
    "identity only": {},
    "mode with refresh": {"mode": "1920x1080@60"},
    "mode without refresh": {"mode": "3840x2160"},
    "decimal refresh": {"mode": "1920x1080@59.94"},
    "interlaced": {"mode": "1920x1080i@60"},
    "preferred": {"mode": "preferred"},
    "every transform": {"transform": "flipped-rotate-270"},
    "scale bounds": {"scale": 4},
    "brightness zero": {"brightness": 0},
    "contrast full": {"contrast": 100},
    "input": {"input": "HDMI-1"},
    "input in another case": {"input": "displayport-2"},
    "power standby": {"power": "standby"},
    "power suspend": {"power": "suspend"},
    "power off": {"power": "off"},
    "all fields": {
        "mode": "1280x720@50", "transform": "rotate-90", "scale": 1, "brightness": 55,
        "contrast": 45, "input": "DisplayPort-1", "power": "on",
    },
}  # fmt: skip
BAD = {
    "not an object": (["mode", "1920x1080"], ["notObjects"]),
    "wrong apiVersion": ({**BASE, "apiVersion": "display.liken.sh/v1"}, ["badIdentity"]),
    "no kind": ({"apiVersion": displayconfig.API_VERSION}, ["badIdentity"]),
    "unknown field": ({**BASE, "rotation": 90}, ["unknownFields"]),
    "misspelled field": ({**BASE, "brightnes": 50}, ["unknownFields"]),
    "mode without height": ({**BASE, "mode": "1920x"}, ["badMode"]),
    "mode with Hz suffix": ({**BASE, "mode": "1920x1080@60Hz"}, ["badMode"]),
    "mode upper X": ({**BASE, "mode": "1920X1080"}, ["badMode"]),
    "mode zero width": ({**BASE, "mode": "0x1080"}, ["badMode"]),
    "mode trailing newline": ({**BASE, "mode": "1920x1080\n"}, ["badMode"]),
    "mode as number": ({**BASE, "mode": 1080}, ["badMode"]),
    "mode capitalised word": ({**BASE, "mode": "Preferred"}, ["badMode"]),
    "transform in degrees": ({**BASE, "transform": "90"}, ["badTransform"]),
    "transform old name": ({**BASE, "transform": "rotate90"}, ["badTransform"]),
    "scale zero": ({**BASE, "scale": 0}, ["badScale"]),
    "scale five": ({**BASE, "scale": 5}, ["badScale"]),
    "scale fractional": ({**BASE, "scale": 1.5}, ["badScale"]),
    "scale as double": ({**BASE, "scale": 2.0}, ["badScale"]),
    "brightness over": ({**BASE, "brightness": 101}, ["badBrightness"]),
    "brightness negative": ({**BASE, "brightness": -1}, ["badBrightness"]),
    "brightness as string": ({**BASE, "brightness": "50"}, ["badBrightness"]),
    "brightness as bool": ({**BASE, "brightness": True}, ["badBrightness"]),
    "contrast over": ({**BASE, "contrast": 250}, ["badContrast"]),
    "input empty": ({**BASE, "input": ""}, ["badInput"]),
    "input as number": ({**BASE, "input": 17}, ["badInput"]),
    "input too long": ({**BASE, "input": "x" * 65}, ["badInput"]),
    "input without its dash": ({**BASE, "input": "hdmi1"}, ["badInput"]),
    "input with a prefix": ({**BASE, "input": "xHDMI-1"}, ["badInput"]),
    "input with a suffix": ({**BASE, "input": "HDMI-10"}, ["badInput"]),
    "power unknown": ({**BASE, "power": "sleep"}, ["badPower"]),
    "power hard off": ({**BASE, "power": "off-hard"}, ["badPower"]),
    "power capitalised": ({**BASE, "power": "On"}, ["badPower"]),
    "power as bool": ({**BASE, "power": True}, ["badPower"]),
    "two bad fields": ({**BASE, "mode": "big", "contrast": 101}, ["badMode", "badContrast"]),
}


def _slice(node: str | None, driver: str = DRIVER) -> dict[str, Any]:
    pool = {"name": "p", "generation": 1, "resourceSliceCount": 1}
    spec: dict[str, Any] = {"driver": driver, "pool": pool}
    if node is not None:
        spec["nodeName"] = node
    return {"spec": spec}


OPERATOR = "system:serviceaccount:display-system:display-operator"
SLICE_WRITES = {
    "own node create": (OPERATOR, {NODE_CLAIM: ["n1"]}, "CREATE", _slice("n1"), None, True),
    "own node delete": (OPERATOR, {NODE_CLAIM: ["n1"]}, "DELETE", None, _slice("n1"), True),
    "other node update": (OPERATOR, {NODE_CLAIM: ["n1"]}, "UPDATE", _slice("n2"), None, False),
    "other node delete": (OPERATOR, {NODE_CLAIM: ["n1"]}, "DELETE", None, _slice("n2"), False),
    "no node claim": (OPERATOR, {}, "CREATE", _slice("n1"), None, False),
    "cluster-wide slice": (OPERATOR, {NODE_CLAIM: ["n1"]}, "CREATE", _slice(None), None, False),
    "other driver": (OPERATOR, {NODE_CLAIM: ["n1"]}, "CREATE", _slice("n1", "gpu.x"), None, False),
    "another account": (
        "system:serviceaccount:kube-system:scheduler", {}, "CREATE", _slice("n2"), None, True,
    ),
    "a look-alike name": (
        "system:serviceaccount:x:display-operator-old", {}, "CREATE", _slice("n2"), None, True,
    ),
}  # fmt: skip
