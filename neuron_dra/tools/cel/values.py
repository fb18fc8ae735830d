"""The values selectors compute with, and the errors selectors raise.

Owns: the Kubernetes CEL value types `Semver` and `Quantity` (parsing and
ordering as Kubernetes does), the `Value` alias for anything an expression
evaluates to, the public compile and evaluation errors with their kinds, and
`CelError`, the CEL error value the semantic functions raise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from functools import total_ordering
from typing import Any

Value = Any  # a celtypes value, Semver or Quantity


class CompileErrorKind(StrEnum):
    SYNTAX = "syntax"
    TYPE = "type"  # undeclared names, unknown fields, operators on mismatched types
    NOT_BOOL = "not_bool"  # the expression's static type can never be a bool
    TOO_LONG = "too_long"


class EvalErrorKind(StrEnum):
    NO_SUCH_KEY = "no_such_key"
    NO_SUCH_OVERLOAD = "no_such_overload"
    NOT_BOOL = "not_bool"
    DIVISION_BY_ZERO = "division_by_zero"
    INVALID_ARGUMENT = "invalid_argument"
    OTHER = "other"


class CelCompileError(ValueError):
    """The expression is not a valid selector; the message starts with line:column."""

    def __init__(self, kind: CompileErrorKind, message: str, line: int, column: int) -> None:
        super().__init__(f"{line}:{column}: {message}")
        self.kind = kind
        self.line = line
        self.column = column
        self.detail = message


class CelEvalError(RuntimeError):
    """Evaluating a selector against one device failed (Kubernetes: the device is an error)."""

    def __init__(self, kind: EvalErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class CelError(Exception):
    """Internal: a CEL error value, raised by the semantic functions."""

    def __init__(self, kind: EvalErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


@total_ordering
@dataclass(frozen=True, eq=False)
class Semver:
    """A semantic version (semver 2.0, as github.com/blang/semver parses it)."""

    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()
    build: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str, normalize: bool = False) -> Semver:
        if normalize:
            text = _normalize_semver(text)
        match = _SEMVER.match(text)
        if match is None:
            raise ValueError(f"invalid semantic version {text!r}")
        pre: tuple[int | str, ...] = ()
        if match[4]:
            pre = tuple(int(p) if p.isdigit() else p for p in match[4].split("."))
        build = tuple(match[5].split(".")) if match[5] else ()
        return cls(int(match[1]), int(match[2]), int(match[3]), pre, build)

    def _key(self) -> tuple[Any, ...]:
        # A version without pre-release sorts after any pre-release of it; numeric
        # identifiers sort before alphanumeric ones. Build metadata is ignored.
        pre: tuple[Any, ...] = tuple(
            (0, p, "") if isinstance(p, int) else (1, 0, p) for p in self.pre
        )
        return (self.major, self.minor, self.patch, not self.pre, pre)

    def compare(self, other: Semver) -> int:
        a, b = self._key(), other._key()
        return (a > b) - (a < b)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self._key() == other._key()

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return bool(self._key() < other._key())

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(str(p) for p in self.pre)
        if self.build:
            text += "+" + ".".join(self.build)
        return text


def _normalize_semver(text: str) -> str:
    """Kubernetes semver(s, true): drop a leading v, fill missing minor/patch, strip zeros."""
    text = text.removeprefix("v")
    core, sep, rest = text.partition("-") if "-" in text else text.partition("+")
    parts = core.split(".")
    if len(parts) > 3 or not all(p.isdigit() for p in parts):
        return text
    parts = [str(int(p)) for p in parts] + ["0"] * (3 - len(parts))
    return ".".join(parts) + sep + rest


_QUANTITY = re.compile(r"^([+-]?)(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


@dataclass(frozen=True, eq=False)
class Quantity:
    """A Kubernetes resource.Quantity, held exactly as a fraction."""

    value: Fraction
    text: str

    @classmethod
    def parse(cls, text: str) -> Quantity:
        match = _QUANTITY.match(text)
        if match is None:
            raise ValueError(f"quantities must match the regular expression {_QUANTITY.pattern}")
        sign, number, suffix = match[1], match[2], match[3] or ""
        value = Fraction(number)
        if suffix in _BINARY:
            value *= 2 ** _BINARY[suffix]
        elif suffix in _DECIMAL:
            value *= Fraction(10) ** _DECIMAL[suffix]
        elif suffix:
            value *= Fraction(10) ** int(suffix[1:])
        return cls(-value if sign == "-" else value, text)

    def compare(self, other: Quantity) -> int:
        return (self.value > other.value) - (self.value < other.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __str__(self) -> str:
        return self.text
