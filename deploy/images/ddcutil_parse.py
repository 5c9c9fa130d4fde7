"""ddcutil's own parse of capabilities strings, offline: libddcutil's
`ddca_parse_capabilities_string`, called through ctypes (ddcutil has no command that parses a
string without a monitor on a kernel /dev/i2c-N).

    python3 ddcutil_parse.py FILE...

Prints one JSON object: per file, the MCCS version, the command codes and each VCP feature
code with its listed values, as ddcutil parsed them, or the status ddcutil returned. Runs in the
display-operator-cli image (libddcutil4 1.4, whose DDCA_Capabilities layout is declared below,
from its ddcutil_types.h); smoke.py compares it with libdisplay.hardware.mccs.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path

LIBRARY = "libddcutil.so.4"


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint8), ("minor", ctypes.c_uint8)]


class _CapVcp(ctypes.Structure):
    _fields_ = [("marker", ctypes.c_char * 4), ("feature_code", ctypes.c_uint8),
                ("value_ct", ctypes.c_int), ("values", ctypes.POINTER(ctypes.c_uint8))]


class _Capabilities(ctypes.Structure):
    _fields_ = [("marker", ctypes.c_char * 4), ("unparsed_string", ctypes.c_char_p),
                ("version_spec", _Version), ("cmd_ct", ctypes.c_int),
                ("cmd_codes", ctypes.POINTER(ctypes.c_uint8)), ("vcp_code_ct", ctypes.c_int),
                ("vcp_codes", ctypes.POINTER(_CapVcp)), ("msg_ct", ctypes.c_int),
                ("messages", ctypes.POINTER(ctypes.c_char_p))]


def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(LIBRARY)
    lib.ddca_parse_capabilities_string.argtypes = [
        ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(_Capabilities))]
    lib.ddca_parse_capabilities_string.restype = ctypes.c_int
    lib.ddca_free_parsed_capabilities.argtypes = [ctypes.POINTER(_Capabilities)]
    lib.ddca_free_parsed_capabilities.restype = None
    return lib


def parse(lib: ctypes.CDLL, text: bytes) -> dict[str, object]:
    parsed = ctypes.POINTER(_Capabilities)()
    status = lib.ddca_parse_capabilities_string(text, ctypes.byref(parsed))
    if status != 0 or not parsed:
        return {"status": status}
    try:
        caps = parsed.contents
        features = {}
        for i in range(caps.vcp_code_ct):
            vcp = caps.vcp_codes[i]
            features[f"{vcp.feature_code:02X}"] = [vcp.values[j] for j in range(vcp.value_ct)]
        return {
            "status": 0,
            "mccs_version": [caps.version_spec.major, caps.version_spec.minor],
            "commands": [caps.cmd_codes[i] for i in range(caps.cmd_ct)],
            "features": features,
            "messages": [caps.messages[i].decode("utf-8", "replace")
                         for i in range(caps.msg_ct)],
        }
    finally:
        lib.ddca_free_parsed_capabilities(parsed)


def main(argv: list[str]) -> int:
    # libddcutil writes its own notes (no /sys/class/drm here) to fd 1, even at exit: the JSON
    # goes to the real stdout, the library's fd 1 to /dev/null.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    lib = _library()
    found = {name: parse(lib, Path(name).read_bytes()) for name in argv}
    json.dump(found, out, indent=1, sort_keys=True)
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
