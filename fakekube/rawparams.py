"""A ResourceClaim's opaque parameters as the bytes a client sent them, compared as bytes.

kube-apiserver (1.37.2 measured) holds `opaque.parameters` as a RawExtension: the bytes of the
request's JSON value, kept as they came (`{"mode": "1024x768@60"}` with its spaces), and stored
so. It answers them compacted (Go's encoder compacts a RawExtension), so no JSON client can ever
send the stored bytes back. Its immutability checks compare the bytes:
- an update of the claim (labels, finalizers) whose stored `spec` was sent non-compact fails with
  `spec: Invalid value: null: field is immutable`;
- a status write over an allocation whose parameters were written non-compact, or a PUT that
  sends them non-compact over compact ones, fails with `status.allocation: Invalid value: null:
  field cannot be modified once set`.
A Go client writing protobuf keeps the bytes, so a scheduler copying spaced spec bytes into the
allocation leaves a claim whose status no JSON client can write again. The fake keeps the same
bytes and makes the same comparisons; a patch's result is compact, as the apiserver re-encodes
it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fakekube.dra import ALLOCATION_SET, SPEC_IMMUTABLE
from fakekube.status import Cause

JsonObject = dict[str, Any]
Texts = tuple[str, ...]
_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")



@dataclass(frozen=True, slots=True)
class Parameters:
    """The parameters' bytes of each `config` entry, in order: the spec's and the
    allocation's (None without an allocation)."""
    spec: Texts
    allocation: Texts | None


def sent(raw: bytes, obj: JsonObject) -> Parameters:
    """The bytes `raw` (the request body `obj` was decoded from) holds for each parameters
    value; compact for any value it cannot place."""
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return compact(obj)

    def source(path: tuple[str | int, ...]) -> Callable[[Any], str]:
        def text_of(value: Any) -> str:
            return _source(text, path) or _compact(value)
        return text_of

    return _parameters(obj, source)


def compact(obj: JsonObject) -> Parameters:
    """The bytes of an object the apiserver encoded itself (a patch's result)."""
    return _parameters(obj, lambda path: _compact)


def update_causes(old: Parameters, new: Parameters, *, status_only: bool) -> list[Cause]:
    """The byte comparisons of an update: of the spec on the claim, of the allocation on its
    status (each write copies the other part from the stored object)."""
    if not status_only:
        return [SPEC_IMMUTABLE] if new.spec != old.spec else []
    if old.allocation is not None and new.allocation is not None \
            and new.allocation != old.allocation:
        return [ALLOCATION_SET]
    return []


Source = Callable[[tuple[str | int, ...]], Callable[[Any], str]]
_SPEC = ("spec", "devices", "config")
_ALLOCATION = ("status", "allocation", "devices", "config")


def _parameters(obj: JsonObject, source: Source) -> Parameters:
    """Each config entry's parameters as `source(path)(value)` gives their bytes."""
    spec = ((obj.get("spec") or {}).get("devices") or {}).get("config")
    allocation = (obj.get("status") or {}).get("allocation")
    return Parameters(
        spec=_texts(spec, _SPEC, source),
        allocation=None if allocation is None
        else _texts((allocation.get("devices") or {}).get("config"), _ALLOCATION, source))


def _texts(configs: Any, path: tuple[str, ...], source: Source) -> Texts:
    out = []
    for i, config in enumerate(configs if isinstance(configs, list) else ()):
        opaque = config.get("opaque") if isinstance(config, dict) else None
        if isinstance(opaque, dict) and "parameters" in opaque:
            out.append(source((*path, i, "opaque", "parameters"))(opaque["parameters"]))
        else:
            out.append("")
    return tuple(out)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _source(text: str, path: tuple[str | int, ...]) -> str | None:
    """The source text of the value at `path` in the JSON document `text`, found by skipping
    every other value with the decoder's own raw_decode; None where the path is not there."""
    try:
        i = _skip_space(text, 0)
        for part in path:
            found = _member(text, i, part)
            if found is None:
                return None
            i = found
        _, end = _DECODER.raw_decode(text, i)
        return text[i:end]
    except (ValueError, IndexError):
        return None


def _member(text: str, i: int, part: str | int) -> int | None:
    """Where the value of key (or index) `part` of the object (or array) at `i` starts."""
    if text[i] != ("{" if isinstance(part, str) else "["):
        return None
    i, index, found = _skip_space(text, i + 1), 0, None
    while text[i] not in "}]":
        if isinstance(part, str):
            key, i = _DECODER.raw_decode(text, i)
            i = _skip_space(text, _skip_space(text, i) + 1)  # past the ":"
            if key == part:
                found = i  # the last of duplicate keys wins, as in json.loads
        elif index == part:
            return i
        index += 1
        _, i = _DECODER.raw_decode(text, i)
        i = _skip_space(text, i)
        if text[i] == ",":
            i = _skip_space(text, i + 1)
    return found


def _skip_space(text: str, i: int) -> int:
    return _SPACE.match(text, i).end()  # type: ignore[union-attr]  # matches the empty string
