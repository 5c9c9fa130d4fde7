"""Label and field selectors in the apiserver's query syntax (`labelSelector=`, `fieldSelector=`).

Labels (apimachinery `labels.Parse`): comma-separated requirements `k=v`, `k==v`, `k!=v`,
`k in (a,b)`, `k notin (a,b)`, `k` (exists), `!k` (does not exist), `k>1`, `k<1`. `!=` and
`notin` also match objects without the label. Fields (`fields.ParseSelector`): `k=v`, `k==v`,
`k!=v`, joined by commas, with `\\` escaping `,`, `=` and `\\` inside values.
Which field names a kind accepts is the caller's business (see `kinds.Kind.field_labels`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

LabelOp = Literal["=", "!=", "in", "notin", "exists", "!", ">", "<"]

_TOKEN = re.compile(r"\s*(?:(==|!=|=|!|\(|\)|,|<|>)|([^\s(),!=<>]+))")
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}$")
_VALUE = re.compile(rf"^({_NAME})?$")


class SelectorError(ValueError):
    """A selector the apiserver would refuse to parse (answered as 400 BadRequest)."""


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: LabelOp
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        match self.op:
            case "exists":
                return present
            case "!":
                return not present
            case "=" | "in":
                return present and value in self.values
            case "!=" | "notin":
                return not present or value not in self.values
            case ">" | "<":
                if not present or not re.fullmatch(r"-?\d+", value):
                    return False
                bound = int(self.values[0])
                return int(value) > bound if self.op == ">" else int(value) < bound


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        return all(r.matches(labels or {}) for r in self.requirements)


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise SelectorError(f"unable to parse requirement: unexpected text at {text[pos:]!r}")
        out.append(m.group(1) or m.group(2))
        pos = m.end()
    return out


class _LabelParser:
    def __init__(self, text: str) -> None:
        self._toks = _tokens(text)
        self._i = 0

    def _peek(self) -> str | None:
        return self._toks[self._i] if self._i < len(self._toks) else None

    def _take(self) -> str:
        tok = self._peek()
        if tok is None:
            raise SelectorError("unable to parse requirement: unexpected end of selector")
        self._i += 1
        return tok

    def parse(self) -> LabelSelector:
        reqs: list[Requirement] = []
        while self._peek() is not None:
            reqs.append(self._requirement())
            if self._peek() is not None and self._take() != ",":
                raise SelectorError("unable to parse requirement: expected ','")
        return LabelSelector(tuple(reqs))

    def _key(self, tok: str) -> str:
        if not _KEY.match(tok) or len(tok.rsplit("/", 1)[-1]) > 63:
            raise SelectorError(f"unable to parse requirement: invalid label key {tok!r}")
        return tok

    def _value(self, tok: str) -> str:
        if not _VALUE.match(tok) or len(tok) > 63:
            raise SelectorError(f"unable to parse requirement: invalid label value {tok!r}")
        return tok

    def _requirement(self) -> Requirement:
        tok = self._take()
        if tok == "!":
            return Requirement(self._key(self._take()), "!")
        key = self._key(tok)
        op = self._peek()
        if op is None or op == ",":
            return Requirement(key, "exists")
        self._take()
        if op in ("=", "==", "!="):
            value = self._peek()
            if value is None or value == ",":
                return Requirement(key, "!=" if op == "!=" else "=", ("",))
            return Requirement(key, "!=" if op == "!=" else "=", (self._value(self._take()),))
        if op in (">", "<"):
            bound = self._take()
            if not re.fullmatch(r"-?\d+", bound):
                raise SelectorError(f"unable to parse requirement: {bound!r} is not an integer")
            return Requirement(key, ">" if op == ">" else "<", (bound,))
        if op in ("in", "notin"):
            return Requirement(key, "in" if op == "in" else "notin", self._set())
        raise SelectorError(f"unable to parse requirement: unknown operator {op!r}")

    def _set(self) -> tuple[str, ...]:
        if self._take() != "(":
            raise SelectorError("unable to parse requirement: expected '(' after set operator")
        values: list[str] = []
        while (tok := self._take()) != ")":
            if tok != ",":
                values.append(self._value(tok))
        if not values:
            raise SelectorError("unable to parse requirement: for 'in', 'notin' operators, "
                                "values set can't be empty")
        return tuple(values)


def parse_labels(text: str | None) -> LabelSelector:
    return _LabelParser(text).parse() if text else LabelSelector()


@dataclass(frozen=True, slots=True)
class FieldTerm:
    field: str
    negate: bool
    value: str


@dataclass(frozen=True, slots=True)
class FieldSelector:
    terms: tuple[FieldTerm, ...] = ()

    def matches(self, value_of: Callable[[str], str]) -> bool:
        return all((value_of(t.field) == t.value) != t.negate for t in self.terms)

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(t.field for t in self.terms)


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, cur, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cur.append(text[i : i + 2])
            i += 2
            continue
        if ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def parse_fields(text: str | None) -> FieldSelector:
    if not text:
        return FieldSelector()
    terms = []
    for raw in _split_unescaped(text, ","):
        for op in ("!=", "==", "="):
            idx = _find_unescaped(raw, op)
            if idx >= 0:
                terms.append(FieldTerm(raw[:idx].strip(), op == "!=",
                                       _unescape(raw[idx + len(op) :])))
                break
        else:
            raise SelectorError(f"invalid selector: {text!r}; can't understand {raw!r}")
    return FieldSelector(tuple(terms))


def _find_unescaped(text: str, op: str) -> int:
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(op, i):
            return i
        i += 1
    return -1
