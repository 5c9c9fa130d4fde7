"""A structural check of CEL expressions, for the admission policies' tests.

It tokenizes an expression by CEL's lexical rules (string literals with their escapes, raw
strings, numbers, identifiers, operators) and checks what a typo breaks: brackets that
balance and nest, a `:` for every `?`, only known root variables, only earlier-declared
`variables.*`, and which functions are called. It does not build a syntax tree, type-check
or evaluate anything; a CEL expression that passes may still be rejected by an apiserver.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Literal

TokenKind = Literal["string", "number", "ident", "op"]

_STRING = re.compile(
    r"""(?P<prefix>[rRbB]{0,2})(?P<quote>'''|\"\"\"|'|")""",
)
_NUMBER = re.compile(
    r"0x[0-9a-fA-F]+u?|[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+(?:[eE][+-]?[0-9]+)?u?"
)
_IDENT = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
_OPERATORS = ("==", "!=", "<=", ">=", "&&", "||", "!", "<", ">", "+", "-", "*", "/", "%",
              "?", ":", ".", ",", "[", "]", "(", ")", "{", "}")  # fmt: skip
_ESCAPE = re.compile(
    r"""\\(?:[abfnrtv\\?"'`]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-3][0-7]{2})"""
)
_PAIRS = {")": "(", "]": "[", "}": "{"}
_MACROS = {"all", "exists", "exists_one", "filter", "map"}
_LITERALS = {"true", "false", "null"}
# Type names are values in CEL (`type(x) == int`).
_TYPES = {"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type"}
# The variables a ValidatingAdmissionPolicy's expressions see.
ADMISSION_ROOTS = {
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
    "authorizer",
    "variables",
}


class CelSyntaxError(ValueError):
    """An expression that is not well-formed CEL, with the offending text."""


@dataclass(frozen=True, slots=True)
class Token:
    kind: TokenKind
    text: str
    # The string's value, for string tokens.
    value: str = ""


def _string_end(expr: str, start: int, quote: str, *, raw: bool) -> int:
    """Index just past the closing quote of a literal whose body starts at `start`."""
    i = start
    while i < len(expr):
        if expr.startswith(quote, i):
            return i + len(quote)
        if expr[i] == "\n" and len(quote) == 1:
            break
        if expr[i] == "\\" and not raw:
            escape = _ESCAPE.match(expr, i)
            if escape is None:
                raise CelSyntaxError(f"bad escape {expr[i:i + 2]!r} in {expr!r}")
            i = escape.end()
            continue
        i += 1
    raise CelSyntaxError(f"unterminated string in {expr!r}")


def _decode(body: str, *, raw: bool) -> str:
    if raw:
        return body
    return body.encode("latin-1", "backslashreplace").decode("unicode_escape")


def tokenize(expr: str) -> list[Token]:
    tokens: list[Token] = []
    i = 0
    while i < len(expr):
        if expr[i].isspace():
            i += 1
            continue
        string = _STRING.match(expr, i)
        if string is not None:
            raw = "r" in string.group("prefix").lower()
            body_start = string.end()
            end = _string_end(expr, body_start, string.group("quote"), raw=raw)
            body = expr[body_start : end - len(string.group("quote"))]
            tokens.append(Token("string", expr[i:end], _decode(body, raw=raw)))
            i = end
            continue
        for pattern, kind in ((_NUMBER, "number"), (_IDENT, "ident")):
            match = pattern.match(expr, i)
            if match is not None:
                tokens.append(Token(kind, match.group()))  # type: ignore[arg-type]
                i = match.end()
                break
        else:
            op = next((op for op in _OPERATORS if expr.startswith(op, i)), None)
            if op is None:
                raise CelSyntaxError(f"unexpected character {expr[i]!r} in {expr!r}")
            tokens.append(Token("op", op))
            i += len(op)
    return tokens


def _check_brackets(tokens: list[Token], expr: str) -> None:
    stack: list[str] = []
    questions = 0
    colons = 0
    for token in tokens:
        if token.kind != "op":
            continue
        if token.text in "([{":
            stack.append(token.text)
        elif token.text in _PAIRS:
            if not stack or stack.pop() != _PAIRS[token.text]:
                raise CelSyntaxError(f"unbalanced {token.text!r} in {expr!r}")
        elif token.text == "?":
            questions += 1
        elif token.text == ":" and (not stack or stack[-1] != "{"):
            colons += 1
    if stack:
        raise CelSyntaxError(f"unclosed {stack[-1]!r} in {expr!r}")
    if questions != colons:
        raise CelSyntaxError(f"{questions} '?' but {colons} ':' in {expr!r}")


def _bound_by_macros(tokens: list[Token]) -> set[str]:
    """Names a macro binds: `x.all(p, ...)` binds p."""
    bound = set()
    for i in range(len(tokens) - 3):
        window = tokens[i : i + 4]
        if (
            window[0].kind == "ident"
            and window[0].text in _MACROS
            and window[1].text == "("
            and window[2].kind == "ident"
            and window[3].text == ","
        ):
            bound.add(window[2].text)
    return bound


def functions_called(expr: str) -> set[str]:
    """Every name called as a function or a method: `size(x)`, `x.matches(r)`."""
    tokens = tokenize(expr)
    return {
        token.text
        for token, following in itertools.pairwise(tokens)
        if token.kind == "ident" and following.text == "("
    }


def variables_used(expr: str) -> set[str]:
    tokens = tokenize(expr)
    return {
        tokens[i + 2].text
        for i in range(len(tokens) - 2)
        if tokens[i].text == "variables"
        and tokens[i + 1].text == "."
        and tokens[i + 2].kind == "ident"
    }


def _indexes(previous: Token) -> bool:
    """Whether a `[` after this token indexes a value (`m['k']`) rather than opening a list."""
    if previous.kind == "ident":
        return previous.text != "in"
    return previous.kind == "string" or previous.text in (")", "]")


def string_lists(expr: str) -> list[list[str]]:
    """The values of every list literal made only of string literals, in order."""
    tokens = tokenize(expr)
    lists = []
    for start, token in enumerate(tokens):
        if token.text != "[" or (start and _indexes(tokens[start - 1])):
            continue
        values: list[str] = []
        for item, separator in zip(tokens[start + 1 :: 2], tokens[start + 2 :: 2], strict=False):
            if item.kind != "string" or separator.text not in (",", "]"):
                break
            values.append(item.value)
            if separator.text == "]":
                lists.append(values)
                break
    return lists


def string_arguments(expr: str, function: str) -> list[str]:
    """The string literal passed to every call of `function`, e.g. the regex of matches()."""
    tokens = tokenize(expr)
    return [
        tokens[i + 2].value
        for i in range(len(tokens) - 2)
        if tokens[i].text == function
        and tokens[i + 1].text == "("
        and tokens[i + 2].kind == "string"
    ]


def check(expr: str, *, declared: set[str], roots: set[str] = ADMISSION_ROOTS) -> None:
    """Raise CelSyntaxError unless `expr` is structurally sound CEL over the given names."""
    tokens = tokenize(expr)
    if not tokens:
        raise CelSyntaxError("empty expression")
    _check_brackets(tokens, expr)
    undeclared = variables_used(expr) - declared
    if undeclared:
        raise CelSyntaxError(f"variables {sorted(undeclared)} not declared before {expr!r}")
    known = roots | _bound_by_macros(tokens) | _LITERALS | _TYPES | {"in"}
    for i, token in enumerate(tokens):
        if token.kind != "ident":
            continue
        after_dot = i > 0 and tokens[i - 1].text == "."
        called = i + 1 < len(tokens) and tokens[i + 1].text == "("
        if not after_dot and not called and token.text not in known:
            raise CelSyntaxError(f"unknown name {token.text!r} in {expr!r}")
