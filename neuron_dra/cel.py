"""CEL device selectors with the semantics of Kubernetes DRA (resource.k8s.io/v1).

A ResourceClaim's `selectors[].cel.expression` is evaluated by the scheduler
against one device at a time, with one variable:

    device.driver                     string
    device.attributes[domain][name]   int | bool | string | semver
    device.capacity[domain][name]     quantity
    device.allowMultipleAllocations   bool (only where the slice sets it)

An attribute published under a short name (no `domain/` prefix) belongs to the
driver's domain. Looking up a domain the device has nothing in yields an empty
map rather than an error, so `device.attributes['other.com'].x` fails with
"no such key" for `x`, while `'x' in device.attributes['other.com']` is false.
The result must be a bool; anything else is an error.

Two evaluators share one set of semantic functions so they cannot drift:

- the general path is cel-python's interpreter (`celpy`), given the
  Kubernetes extensions (semver, quantity, the extended string library,
  heterogeneous equality, strict `&&`/`||` typing) as functions;
- the fast path compiles the common selector shapes (attribute lookups,
  literals, comparisons, `in`, `!`, `&&`, `||`, semver/quantity and string
  methods) straight to Python closures. The celpy interpreter re-walks its
  parse tree and rebuilds an activation on every evaluation (about 2,000
  evaluations/s on a 2-core machine), which is far too slow to simulate a
  cluster's worth of devices; the closures run over the prebuilt DeviceView.

Compile-time checks follow the Kubernetes type checker where the types are
known statically (undeclared names, unknown `device` fields, operators applied
to mismatched types, a result that cannot be a bool) and the 10 KiB limit on
expression length. Runtime cost limits are not enforced.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from functools import total_ordering
from typing import Any, Final, cast

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError as _CelpyError
from celpy.evaluation import celbytes, celstr

__all__ = [
    "MAX_EXPRESSION_BYTES",
    "CelCompileError",
    "CelEvalError",
    "CompileErrorKind",
    "DeviceView",
    "EvalErrorKind",
    "Quantity",
    "Selector",
    "Semver",
    "compile_selector",
    "referenced_attributes",
]

MAX_EXPRESSION_BYTES: Final = 10 * 1024
"""resource.k8s.io CELSelectorExpressionMaxLength."""

# celpy logs every evaluation error at debug level through its own loggers and
# prints transpiler internals at info level; selectors that fail are normal here.
logging.getLogger("celpy").setLevel(logging.WARNING)


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


class _CelError(Exception):
    """Internal: a CEL error value, raised by the semantic functions."""

    def __init__(self, kind: EvalErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


# --- Kubernetes value types -------------------------------------------------

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
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


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


# --- Device activation ------------------------------------------------------

Value = Any  # a celtypes value, Semver or Quantity

_EMPTY: Final[Mapping[str, Value]] = {}


class _DomainMap(celtypes.MapType):
    """Outer attribute/capacity map: an unknown domain reads as an empty map."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType()


@dataclass(frozen=True, eq=False)
class DeviceView:
    """One device as CEL sees it, built once and evaluated against many selectors."""

    driver: str
    attributes: Mapping[str, Mapping[str, Value]]
    capacity: Mapping[str, Mapping[str, Quantity]]
    allow_multiple_allocations: bool | None = None
    name: str = ""
    _celpy: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_slice_device(cls, driver: str, device: Mapping[str, Any]) -> DeviceView:
        """From a ResourceSlice `spec.devices[]` entry; raises ValueError on malformed values."""
        attributes: dict[str, dict[str, Value]] = {}
        for qualified, typed in (device.get("attributes") or {}).items():
            domain, name = _split_qualified(qualified, driver)
            attributes.setdefault(domain, {})[name] = _attribute_value(qualified, typed)
        capacity: dict[str, dict[str, Quantity]] = {}
        for qualified, entry in (device.get("capacity") or {}).items():
            domain, name = _split_qualified(qualified, driver)
            capacity.setdefault(domain, {})[name] = Quantity.parse(str(entry["value"]))
        allow = device.get("allowMultipleAllocations")
        return cls(
            driver=driver,
            attributes=attributes,
            capacity=capacity,
            allow_multiple_allocations=None if allow is None else bool(allow),
            name=str(device.get("name", "")),
        )

    def celpy_activation(self) -> dict[str, Any]:
        """The celpy variables for this device, built on first use and kept."""
        if not self._celpy:
            fields: dict[Any, Any] = {
                celtypes.StringType("driver"): celtypes.StringType(self.driver),
                celtypes.StringType("attributes"): _DomainMap(
                    {
                        celtypes.StringType(d): celtypes.MapType(
                            {celtypes.StringType(k): v for k, v in names.items()}
                        )
                        for d, names in self.attributes.items()
                    }
                ),
                celtypes.StringType("capacity"): _DomainMap(
                    {
                        celtypes.StringType(d): celtypes.MapType(
                            {celtypes.StringType(k): v for k, v in names.items()}
                        )
                        for d, names in self.capacity.items()
                    }
                ),
            }
            if self.allow_multiple_allocations is not None:
                fields[celtypes.StringType("allowMultipleAllocations")] = celtypes.BoolType(
                    self.allow_multiple_allocations
                )
            self._celpy["device"] = celtypes.MapType(fields)
        return self._celpy


def _split_qualified(name: str, driver: str) -> tuple[str, str]:
    domain, sep, short = name.partition("/")
    return (domain, short) if sep else (driver, name)


def _attribute_value(name: str, typed: Mapping[str, Any]) -> Value:
    if "int" in typed:
        return celtypes.IntType(int(typed["int"]))
    if "bool" in typed:
        return celtypes.BoolType(bool(typed["bool"]))
    if "string" in typed:
        return celtypes.StringType(str(typed["string"]))
    if "version" in typed:
        try:
            return Semver.parse(str(typed["version"]))
        except ValueError as error:
            raise ValueError(f"attribute {name}: parse semantic version: {error}") from None
    raise ValueError(f"attribute {name}: unsupported attribute value {dict(typed)!r}")


# --- Semantics shared by both evaluators ------------------------------------


def _is_bool(v: Value) -> bool:
    return type(v) is bool or isinstance(v, celtypes.BoolType)


def _is_num(v: Value) -> bool:
    return isinstance(v, int | float) and not _is_bool(v)


def _type_name(v: Value) -> str:
    if _is_bool(v):
        return "bool"
    if isinstance(v, celtypes.UintType):
        return "uint"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "double"
    if isinstance(v, str):
        return "string"
    if isinstance(v, bytes):
        return "bytes"
    if v is None:
        return "null_type"
    if isinstance(v, Semver):
        return "kubernetes.Semver"
    if isinstance(v, Quantity):
        return "kubernetes.Quantity"
    if isinstance(v, Mapping):
        return "map"
    if isinstance(v, list):
        return "list"
    return type(v).__name__


def _overload(op: str, *args: Value) -> _CelError:
    types = ", ".join(_type_name(a) for a in args)
    return _CelError(EvalErrorKind.NO_SUCH_OVERLOAD, f"no such overload: {op}({types})")


def _native(v: Value) -> int | float:
    # celtypes refuse mixed int/double arithmetic; CEL compares numbers by value.
    return int(v) if isinstance(v, int) else float(v)


def cel_eq(a: Value, b: Value) -> bool:
    """CEL equality as Kubernetes enables it: values of different types are unequal."""
    if _is_bool(a) or _is_bool(b):
        return _is_bool(a) and _is_bool(b) and bool(a) == bool(b)
    if _is_num(a) and _is_num(b):
        return _native(a) == _native(b)
    if isinstance(a, str) and isinstance(b, str):
        return str.__eq__(a, b)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return len(a) == len(b) and all(k in b and cel_eq(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(cel_eq(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is not type(b) and not (isinstance(a, bytes) and isinstance(b, bytes)):
        return False
    return bool(a == b)


def cel_compare(op: str, a: Value, b: Value) -> int:
    """Ordering for < <= > >=: numbers across int/uint/double, else the same type."""
    if _is_bool(a) and _is_bool(b):
        p, q = bool(a), bool(b)
        return (p > q) - (p < q)
    if _is_num(a) and _is_num(b):
        x, y = _native(a), _native(b)
        return (x > y) - (x < y)
    if isinstance(a, str) and isinstance(b, str):
        return (a > b) - (a < b)
    if isinstance(a, bytes) and isinstance(b, bytes):
        return (a > b) - (a < b)
    raise _overload(op, a, b)


def cel_in(item: Value, container: Value) -> bool:
    if isinstance(container, Mapping):
        return item in container if isinstance(item, str | int) else False
    if isinstance(container, list):
        return any(cel_eq(item, x) for x in container)
    raise _overload("@in", item, container)


def cel_select(container: Value, key: Value) -> Value:
    """container[key] and container.key."""
    if isinstance(container, Mapping):
        try:
            return container[key]
        except KeyError:
            raise _CelError(EvalErrorKind.NO_SUCH_KEY, f"no such key: {key}") from None
    if isinstance(container, list) and isinstance(key, int) and not _is_bool(key):
        if 0 <= key < len(container):
            return container[key]
        raise _CelError(EvalErrorKind.INVALID_ARGUMENT, f"index out of range: {key}")
    raise _overload("_[_]", container, key)


def _want(op: str, check: Callable[[Value], bool], *args: Value) -> None:
    if not all(check(a) for a in args):
        raise _overload(op, *args)


def _is_str(v: Value) -> bool:
    return isinstance(v, str)


def _is_int(v: Value) -> bool:
    return isinstance(v, int) and not _is_bool(v)


def _semver(text: Value, normalize: Value = False) -> Semver:
    _want("semver", _is_str, text)
    try:
        return Semver.parse(str(text), normalize=bool(normalize))
    except ValueError as error:
        raise _CelError(EvalErrorKind.INVALID_ARGUMENT, f"semver: {error}") from None


def _is_semver(text: Value, normalize: Value = False) -> bool:
    _want("isSemver", _is_str, text)
    try:
        Semver.parse(str(text), normalize=bool(normalize))
    except ValueError:
        return False
    return True


def _quantity(text: Value) -> Quantity:
    _want("quantity", _is_str, text)
    try:
        return Quantity.parse(str(text))
    except ValueError as error:
        raise _CelError(EvalErrorKind.INVALID_ARGUMENT, f"quantity: {error}") from None


def _is_quantity(text: Value) -> bool:
    _want("isQuantity", _is_str, text)
    try:
        Quantity.parse(str(text))
    except ValueError:
        return False
    return True


def _compare_to(a: Value, b: Value) -> int:
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a.compare(b)
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return a.compare(b)
    raise _overload("compareTo", a, b)


def _greater(a: Value, b: Value) -> bool:
    if type(a) is not type(b) or not isinstance(a, Semver | Quantity):
        raise _overload("isGreaterThan", a, b)
    return _compare_to(a, b) > 0


def _less(a: Value, b: Value) -> bool:
    if type(a) is not type(b) or not isinstance(a, Semver | Quantity):
        raise _overload("isLessThan", a, b)
    return _compare_to(a, b) < 0


def _semver_part(name: str) -> Callable[[Value], int]:
    def part(v: Value) -> int:
        if not isinstance(v, Semver):
            raise _overload(name, v)
        return int(getattr(v, name))

    return part


def _as_integer(q: Value) -> int:
    if not isinstance(q, Quantity):
        raise _overload("asInteger", q)
    if q.value.denominator != 1 or not _INT64_MIN <= q.value <= _INT64_MAX:
        raise _CelError(EvalErrorKind.INVALID_ARGUMENT, "cannot convert value to integer")
    return int(q.value)


def _is_integer(q: Value) -> bool:
    if not isinstance(q, Quantity):
        raise _overload("isInteger", q)
    return q.value.denominator == 1 and _INT64_MIN <= q.value <= _INT64_MAX


def _as_float(q: Value) -> float:
    if not isinstance(q, Quantity):
        raise _overload("asApproximateFloat", q)
    return float(q.value)


def _sign(q: Value) -> int:
    if not isinstance(q, Quantity):
        raise _overload("sign", q)
    return (q.value > 0) - (q.value < 0)


def _q_arith(name: str, direction: int) -> Callable[[Value, Value], Quantity]:
    def arith(q: Value, other: Value) -> Quantity:
        if not isinstance(q, Quantity) or not (isinstance(other, Quantity) or _is_int(other)):
            raise _overload(name, q, other)
        delta = other.value if isinstance(other, Quantity) else Fraction(int(other))
        value = q.value + direction * delta
        return Quantity(value, str(value))

    return arith


def _str_method(name: str, impl: Callable[..., Value], arity: int) -> Callable[..., Value]:
    def method(target: Value, *args: Value) -> Value:
        if not isinstance(target, str) or len(args) != arity or not all(_is_str(a) for a in args):
            raise _overload(name, target, *args)
        return impl(str(target), *(str(a) for a in args))

    return method


def _matches(target: Value, pattern: Value) -> bool:
    _want("matches", _is_str, target, pattern)
    try:
        return re.search(str(pattern), str(target)) is not None
    except re.error as error:
        raise _CelError(
            EvalErrorKind.INVALID_ARGUMENT, f"invalid regular expression: {error}"
        ) from None


def _size(v: Value) -> int:
    if isinstance(v, str | bytes | list | Mapping):
        return len(v)
    raise _overload("size", v)


def _char_at(target: Value, index: Value) -> str:
    if not isinstance(target, str) or not _is_int(index):
        raise _overload("charAt", target, index)
    if not 0 <= index <= len(target):
        raise _CelError(EvalErrorKind.INVALID_ARGUMENT, f"index out of range: {index}")
    return str(target)[index : index + 1]


def _substring(target: Value, start: Value, end: Value = None) -> str:
    stop = len(target) if end is None and isinstance(target, str) else end
    if not isinstance(target, str) or not _is_int(start) or not _is_int(stop):
        raise _overload("substring", target, start)
    if not 0 <= start <= stop <= len(target):
        raise _CelError(EvalErrorKind.INVALID_ARGUMENT, f"substring out of range: {start}, {stop}")
    return str(target)[start:stop]


# Method name -> implementation taking the target first; shared by both paths.
METHODS: Final[dict[str, Callable[..., Value]]] = {
    "compareTo": _compare_to,
    "isGreaterThan": _greater,
    "isLessThan": _less,
    "major": _semver_part("major"),
    "minor": _semver_part("minor"),
    "patch": _semver_part("patch"),
    "asInteger": _as_integer,
    "isInteger": _is_integer,
    "asApproximateFloat": _as_float,
    "sign": _sign,
    "add": _q_arith("add", 1),
    "sub": _q_arith("sub", -1),
    "startsWith": _str_method("startsWith", str.startswith, 1),
    "endsWith": _str_method("endsWith", str.endswith, 1),
    "contains": _str_method("contains", str.__contains__, 1),
    "matches": _matches,
    "lowerAscii": _str_method("lowerAscii", lambda s: s.lower() if s.isascii() else s, 0),
    "upperAscii": _str_method("upperAscii", lambda s: s.upper() if s.isascii() else s, 0),
    "trim": _str_method("trim", str.strip, 0),
    "indexOf": _str_method("indexOf", str.find, 1),
    "lastIndexOf": _str_method("lastIndexOf", str.rfind, 1),
    "replace": _str_method("replace", str.replace, 2),
    "split": _str_method("split", lambda s, sep: [celtypes.StringType(p) for p in s.split(sep)], 1),
    "charAt": _char_at,
    "substring": _substring,
    "size": _size,
}

# Global functions (not methods) of the Kubernetes environment.
FUNCTIONS: Final[dict[str, Callable[..., Value]]] = {
    "semver": _semver,
    "isSemver": _is_semver,
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "size": _size,
    "matches": _matches,
}


def _to_cel(value: Value) -> Value:
    """Python results -> celtypes, so celpy's own operators accept them."""
    if type(value) is bool:
        return celtypes.BoolType(value)
    if type(value) is int:
        return celtypes.IntType(value)
    if type(value) is float:
        return celtypes.DoubleType(value)
    if type(value) is str:
        return celtypes.StringType(value)
    return value


# --- The general path: celpy -------------------------------------------------


class _KindTagError(Exception):
    """Carries an EvalErrorKind through a celpy error value."""


def _celpy_function(impl: Callable[..., Value]) -> Callable[..., Value]:
    def call(*args: Value) -> Value:
        for arg in args:
            if isinstance(arg, _CelpyError):
                return arg
        try:
            return _to_cel(impl(*args))
        except _CelError as error:
            return _CelpyError(error.message, _KindTagError, (error.kind.value,))

    call.__name__ = getattr(impl, "__name__", "function")
    return call


def _logical(op: str, short: bool) -> Callable[[Value, Value], Value]:
    """CEL && (short=False) and || (short=True): commutative over errors, strict on types."""

    def logical(a: Value, b: Value) -> Value:
        for v in (a, b):
            if _is_bool(v) and bool(v) is short:
                return celtypes.BoolType(short)
        for v in (a, b):
            if isinstance(v, _CelpyError):
                return v
        for v in (a, b):
            if not _is_bool(v):
                error = _overload(op, a, b)
                return _CelpyError(error.message, _KindTagError, (error.kind.value,))
        return celtypes.BoolType(not short)

    return logical


def _not(a: Value) -> Value:
    if isinstance(a, _CelpyError):
        return a
    if not _is_bool(a):
        error = _overload("!_", a)
        return _CelpyError(error.message, _KindTagError, (error.kind.value,))
    return celtypes.BoolType(not a)


def _compare_fn(op: str, test: Callable[[int], bool]) -> Callable[[Value, Value], bool]:
    return lambda a, b: test(cel_compare(op, a, b))


def _celpy_functions() -> dict[str, Callable[..., Value]]:
    functions: dict[str, Callable[..., Value]] = {}
    for name, impl in {**METHODS, **FUNCTIONS}.items():
        if name in METHODS and name in FUNCTIONS:
            # celpy resolves global and member calls through one table: dispatch on arity.
            functions[name] = _celpy_function(_either(METHODS[name], FUNCTIONS[name]))
        else:
            functions[name] = _celpy_function(impl)
    functions.update(
        {
            "_==_": _celpy_function(cel_eq),
            "_!=_": _celpy_function(lambda a, b: not cel_eq(a, b)),
            "_<_": _celpy_function(_compare_fn("_<_", lambda c: c < 0)),
            "_<=_": _celpy_function(_compare_fn("_<=_", lambda c: c <= 0)),
            "_>_": _celpy_function(_compare_fn("_>_", lambda c: c > 0)),
            "_>=_": _celpy_function(_compare_fn("_>=_", lambda c: c >= 0)),
            "_in_": _celpy_function(cel_in),
            "_[_]": _celpy_function(cel_select),
            "_&&_": _logical("_&&_", short=False),
            "_||_": _logical("_||_", short=True),
            "!_": _not,
        }
    )
    return functions


def _either(method: Callable[..., Value], function: Callable[..., Value]) -> Callable[..., Value]:
    def call(*args: Value) -> Value:
        try:
            return method(*args)
        except _CelError:
            return function(*args)

    return call


_ENV = celpy.Environment()
_CELPY_FUNCTIONS = _celpy_functions()


_MISSING = re.compile(r"no such member in mapping: (?:StringType\()?'([^']*)'")


def _celpy_error_kind(error: _CelpyError) -> tuple[EvalErrorKind, str]:
    args = error.args
    if len(args) >= 3 and args[1] is _KindTagError:
        return EvalErrorKind(args[2][0]), str(args[0])
    message = str(args[0]) if args else str(error)
    if "no such member" in message or "no such key" in message:
        key = _MISSING.search(message)
        return EvalErrorKind.NO_SUCH_KEY, f"no such key: {key[1]}" if key else message
    if "overload" in message or "does not support field selection" in message:
        return EvalErrorKind.NO_SUCH_OVERLOAD, message
    if "divide by zero" in message or "modulus" in message:
        return EvalErrorKind.DIVISION_BY_ZERO, message
    return EvalErrorKind.OTHER, message


# --- Selector -----------------------------------------------------------------


Fn = Callable[[DeviceView], Value]
_Tree = lark.Tree[Any]


@dataclass(frozen=True, eq=False)
class Selector:
    """A compiled selector; `matches` is safe to call from many threads."""

    expression: str
    fast: Fn | None  # None when the expression needs the general path
    _program: Any = field(repr=False)

    def matches(self, device: DeviceView) -> bool:
        if self.fast is not None:
            return _finish(self.fast, device)
        return self.matches_general(device)

    def matches_general(self, device: DeviceView) -> bool:
        """Evaluate with celpy even where a fast path exists (the reference for tests)."""
        try:
            result = self._program.evaluate(device.celpy_activation())
        except _CelpyError as error:
            kind, message = _celpy_error_kind(error)
            raise CelEvalError(kind, message) from None
        if isinstance(result, _CelpyError):
            kind, message = _celpy_error_kind(result)
            raise CelEvalError(kind, message)
        if not _is_bool(result):
            raise CelEvalError(
                EvalErrorKind.NOT_BOOL,
                f"CEL result of type {_type_name(result)} could not be converted to bool",
            )
        return bool(result)


def _finish(fn: Fn, device: DeviceView) -> bool:
    try:
        result = fn(device)
    except _CelError as error:
        raise CelEvalError(error.kind, error.message) from None
    if result is True or result is False:
        return result
    if not _is_bool(result):
        raise CelEvalError(
            EvalErrorKind.NOT_BOOL,
            f"CEL result of type {_type_name(result)} could not be converted to bool",
        )
    return bool(result)


def compile_selector(expression: str) -> Selector:
    """Parse, type-check and prepare a selector; raises CelCompileError."""
    size = len(expression.encode())
    if size > MAX_EXPRESSION_BYTES:
        raise CelCompileError(
            CompileErrorKind.TOO_LONG,
            f"expression is {size} bytes, longer than the limit of {MAX_EXPRESSION_BYTES}",
            1,
            1,
        )
    tree = _parse(expression)
    result_type = _Checker().check(tree)
    if result_type not in ("bool", "dyn"):
        line, column = _position(tree)
        raise CelCompileError(
            CompileErrorKind.NOT_BOOL,
            f"must evaluate to bool or the unknown type, not {result_type}",
            line,
            column,
        )
    program = _ENV.program(tree, functions=_CELPY_FUNCTIONS)
    return Selector(expression, _FastCompiler().compile(tree), program)


def _parse(expression: str) -> _Tree:
    try:
        return _ENV.compile(expression)
    except CELParseError as error:
        line = getattr(error, "line", None) or 1
        column = getattr(error, "column", None) or 1
        first = str(error).splitlines()
        detail = "syntax error"
        if error.__context__ is not None:
            detail = f"syntax error: {str(error.__context__).splitlines()[0]}"
        elif first:
            detail = f"syntax error near {first[0].strip()!r}"
        raise CelCompileError(CompileErrorKind.SYNTAX, detail, line, column) from None


def _position(tree: _Tree | lark.Token) -> tuple[int, int]:
    if isinstance(tree, lark.Token):
        return tree.line or 1, tree.column or 1
    for token in tree.scan_values(lambda t: isinstance(t, lark.Token)):
        return token.line or 1, token.column or 1
    return 1, 1


def _children(tree: _Tree) -> list[Any]:
    return list(tree.children)


def _ident_token(tree: Any) -> lark.Token:
    return cast(lark.Token, tree)


# --- Static checks --------------------------------------------------------------

_PRIMITIVES = {"bool", "int", "uint", "double", "string", "bytes", "null"}
_NUMERIC = {"int", "uint", "double"}
_ORDERED = {"int", "uint", "double", "string", "bytes", "bool"}
_DEVICE_FIELDS = {
    "driver": "string",
    "attributes": "attrs",
    "capacity": "caps",
    "allowMultipleAllocations": "bool",
}
# method -> (target types it applies to, result type); "dyn" targets are always allowed.
_METHOD_TYPES: dict[str, tuple[set[str], str]] = {
    "compareTo": ({"semver", "quantity"}, "int"),
    "isGreaterThan": ({"semver", "quantity"}, "bool"),
    "isLessThan": ({"semver", "quantity"}, "bool"),
    "major": ({"semver"}, "int"),
    "minor": ({"semver"}, "int"),
    "patch": ({"semver"}, "int"),
    "asInteger": ({"quantity"}, "int"),
    "isInteger": ({"quantity"}, "bool"),
    "asApproximateFloat": ({"quantity"}, "double"),
    "sign": ({"quantity"}, "int"),
    "add": ({"quantity"}, "quantity"),
    "sub": ({"quantity"}, "quantity"),
    "startsWith": ({"string"}, "bool"),
    "endsWith": ({"string"}, "bool"),
    "contains": ({"string"}, "bool"),
    "matches": ({"string"}, "bool"),
    "lowerAscii": ({"string"}, "string"),
    "upperAscii": ({"string"}, "string"),
    "trim": ({"string"}, "string"),
    "indexOf": ({"string"}, "int"),
    "lastIndexOf": ({"string"}, "int"),
    "replace": ({"string"}, "string"),
    "split": ({"string"}, "list"),
    "charAt": ({"string"}, "string"),
    "substring": ({"string"}, "string"),
    "size": ({"string", "bytes", "list", "map", "attrs", "caps", "attrs_in", "caps_in"}, "int"),
}
_MACROS = {"all": "bool", "exists": "bool", "exists_one": "bool", "map": "list", "filter": "list"}
_FUNCTION_TYPES = {
    "semver": "semver",
    "isSemver": "bool",
    "quantity": "quantity",
    "isQuantity": "bool",
    "size": "int",
    "matches": "bool",
    "int": "int",
    "uint": "uint",
    "double": "double",
    "string": "string",
    "bool": "bool",
    "dyn": "dyn",
}
_REL_OPS = {
    "relation_eq": "_==_",
    "relation_ne": "_!=_",
    "relation_lt": "_<_",
    "relation_le": "_<=_",
    "relation_gt": "_>_",
    "relation_ge": "_>=_",
    "relation_in": "@in",
}
_MAP_TYPES = {"attrs": "attrs_in", "caps": "caps_in", "attrs_in": "dyn", "caps_in": "quantity"}


class _Checker:
    """Best-effort static typing in the style of the cel-go checker Kubernetes runs."""

    def __init__(self) -> None:
        self.bound: list[str] = []

    def fail(self, node: Any, message: str) -> CelCompileError:
        line, column = _position(node)
        return CelCompileError(CompileErrorKind.TYPE, message, line, column)

    def check(self, tree: _Tree) -> str:
        method = getattr(self, "t_" + str(tree.data), None)
        if method is None:
            # Constructs the selector grammar allows but this checker does not type.
            for child in tree.children:
                if isinstance(child, lark.Tree):
                    self.check(child)
            return "dyn"
        return cast(str, method(tree))

    def _single_or(self, tree: _Tree, combine: Callable[[_Tree], str]) -> str:
        kids = _children(tree)
        return self.check(kids[0]) if len(kids) == 1 else combine(tree)

    def t_expr(self, tree: _Tree) -> str:
        kids = _children(tree)
        if len(kids) == 1:
            return self.check(kids[0])
        cond, yes, no = (self.check(k) for k in kids)
        if cond not in ("bool", "dyn"):
            raise self.fail(
                kids[0], f"found no matching overload for '_?_:_' applied to '({cond})'"
            )
        return yes if yes == no else "dyn"

    def _logic(self, tree: _Tree, op: str) -> str:
        kids = _children(tree)
        if len(kids) == 1:
            return self.check(kids[0])
        left, right = self.check(kids[0]), self.check(kids[1])
        for t in (left, right):
            if t not in ("bool", "dyn"):
                raise self.fail(
                    tree, f"found no matching overload for '{op}' applied to '({left}, {right})'"
                )
        return "bool"

    def t_conditionalor(self, tree: _Tree) -> str:
        return self._logic(tree, "_||_")

    def t_conditionaland(self, tree: _Tree) -> str:
        return self._logic(tree, "_&&_")

    def t_relation(self, tree: _Tree) -> str:
        kids = _children(tree)
        if len(kids) == 1:
            return self.check(kids[0])
        op_tree, right_tree = kids
        op = _REL_OPS[str(op_tree.data)]
        left = self.check(op_tree.children[0])
        right = self.check(right_tree)
        self._operands(tree, op, left, right)
        return "bool"

    def _operands(self, tree: _Tree, op: str, left: str, right: str) -> None:
        if op not in ("_==_", "_!=_", "@in") and ({left, right} - _ORDERED - {"dyn"}):
            # Semver, Quantity, maps and lists have no ordering operators, dyn or not.
            raise self.fail(
                tree,
                f"found no matching overload for '{op}' applied to "
                f"'({_show(left)}, {_show(right)})'",
            )
        if "dyn" in (left, right):
            return
        bad = False
        if op in ("_==_", "_!=_"):
            bad = left != right and not ({left, right} <= {"attrs", "caps", "attrs_in", "caps_in"})
        elif op == "@in":
            bad = right not in ("list", "map", "attrs", "caps", "attrs_in", "caps_in")
        else:
            bad = not (
                (left == right and left in _ORDERED) or (left in _NUMERIC and right in _NUMERIC)
            )
        if bad:
            raise self.fail(
                tree,
                f"found no matching overload for '{op}' applied to "
                f"'({_show(left)}, {_show(right)})'",
            )

    def t_addition(self, tree: _Tree) -> str:
        return self._arith(tree, {"addition_add": "_+_", "addition_sub": "_-_"})

    def t_multiplication(self, tree: _Tree) -> str:
        ops = {
            "multiplication_mul": "_*_",
            "multiplication_div": "_/_",
            "multiplication_mod": "_%_",
        }
        return self._arith(tree, ops)

    def _arith(self, tree: _Tree, ops: dict[str, str]) -> str:
        kids = _children(tree)
        if len(kids) == 1:
            return self.check(kids[0])
        op_tree, right_tree = kids
        op = ops[str(op_tree.data)]
        left, right = self.check(op_tree.children[0]), self.check(right_tree)
        allowed = _NUMERIC | ({"string", "bytes", "list"} if op == "_+_" else set())
        if op == "_%_":
            allowed = {"int", "uint"}
        if "dyn" in (left, right):
            # Only the overload of the known operand's type can match: its result type.
            known = right if left == "dyn" else left
            return known if known in allowed else "dyn"
        if left != right or left not in allowed:
            raise self.fail(
                tree,
                f"found no matching overload for '{op}' applied to "
                f"'({_show(left)}, {_show(right)})'",
            )
        return left

    def t_unary(self, tree: _Tree) -> str:
        kids = _children(tree)
        if len(kids) == 1:
            return self.check(kids[0])
        operand = self.check(kids[1])
        if str(kids[0].data) == "unary_not":
            if operand not in ("bool", "dyn"):
                raise self.fail(
                    tree, f"found no matching overload for '!_' applied to '({operand})'"
                )
            return "bool"
        if operand not in ("int", "double", "dyn"):
            raise self.fail(tree, f"found no matching overload for '-_' applied to '({operand})'")
        return operand

    def t_member(self, tree: _Tree) -> str:
        return self.check(tree.children[0])

    def t_primary(self, tree: _Tree) -> str:
        return self.check(tree.children[0])

    def t_paren_expr(self, tree: _Tree) -> str:
        return self.check(tree.children[0])

    def t_literal(self, tree: _Tree) -> str:
        token = _ident_token(tree.children[0])
        return {
            "FLOAT_LIT": "double",
            "INT_LIT": "int",
            "UINT_LIT": "uint",
            "STRING_LIT": "string",
            "MLSTRING_LIT": "string",
            "BYTES_LIT": "bytes",
            "BOOL_LIT": "bool",
            "NULL_LIT": "null",
        }.get(str(token.type), "dyn")

    def t_list_lit(self, tree: _Tree) -> str:
        for child in tree.children:
            if isinstance(child, lark.Tree):
                self.check(child)
        return "list"

    def t_map_lit(self, tree: _Tree) -> str:
        for child in tree.children:
            if isinstance(child, lark.Tree):
                self.check(child)
        return "map"

    def t_exprlist(self, tree: _Tree) -> str:
        for child in tree.children:
            self.check(child)
        return "list"

    def t_mapinits(self, tree: _Tree) -> str:
        return self.t_exprlist(tree)

    def t_ident(self, tree: _Tree) -> str:
        name = str(tree.children[0])
        if name == "device":
            return "device"
        if name in self.bound:
            return "dyn"
        raise self.fail(tree, f"undeclared reference to '{name}' (in container '')")

    def t_member_dot(self, tree: _Tree) -> str:
        target_tree, name_token = tree.children
        name = str(name_token)
        target = self.check(cast(_Tree, target_tree))
        if target == "device":
            if name not in _DEVICE_FIELDS:
                raise self.fail(name_token, f"undefined field '{name}'")
            return _DEVICE_FIELDS[name]
        if target in _MAP_TYPES:
            return _MAP_TYPES[target]
        if target in ("map", "dyn"):
            return "dyn"
        raise self.fail(name_token, f"type '{_show(target)}' does not support field selection")

    def t_member_index(self, tree: _Tree) -> str:
        target_tree, index_tree = tree.children
        target = self.check(cast(_Tree, target_tree))
        index = self.check(cast(_Tree, index_tree))
        if target in _MAP_TYPES:
            if index not in ("string", "dyn"):
                raise self.fail(
                    tree,
                    f"found no matching overload for '_[_]' applied to "
                    f"'({_show(target)}, {_show(index)})'",
                )
            return _MAP_TYPES[target]
        if target in ("map", "list", "dyn"):
            return "dyn"
        raise self.fail(
            tree, f"found no matching overload for '_[_]' applied to '({_show(target)}, {index})'"
        )

    def t_member_dot_arg(self, tree: _Tree) -> str:
        kids = _children(tree)
        target_tree, name_token = kids[0], kids[1]
        args = list(kids[2].children) if len(kids) > 2 and kids[2] is not None else []
        name = str(name_token)
        if name in _MACROS and args and _is_ident(args[0]):
            self.check(target_tree)
            self.bound.append(_ident_name(args[0]))
            try:
                for arg in args[1:]:
                    self.check(arg)
            finally:
                self.bound.pop()
            return _MACROS[name]
        target = self.check(target_tree)
        for arg in args:
            self.check(arg)
        if name not in _METHOD_TYPES:
            raise self.fail(name_token, f"undeclared reference to '{name}' (in container '')")
        targets, result = _METHOD_TYPES[name]
        if target != "dyn" and target not in targets:
            raise self.fail(
                name_token,
                f"found no matching overload for '{name}' applied to '{_show(target)}.(...)'",
            )
        return result

    def t_ident_arg(self, tree: _Tree) -> str:
        kids = _children(tree)
        name = str(kids[0])
        args = list(kids[1].children) if len(kids) > 1 and kids[1] is not None else []
        if name == "has":
            if len(args) != 1 or not _is_selection(args[0]):
                raise self.fail(tree, "invalid argument to has() macro")
            self.check(args[0])
            return "bool"
        types = [self.check(a) for a in args]
        if name not in _FUNCTION_TYPES:
            raise self.fail(kids[0], f"undeclared reference to '{name}' (in container '')")
        if name in ("semver", "quantity", "isSemver", "isQuantity") and (
            not types or types[0] not in ("string", "dyn")
        ):
            shown = ", ".join(_show(t) for t in types)
            raise self.fail(tree, f"found no matching overload for '{name}' applied to '({shown})'")
        return _FUNCTION_TYPES[name]


def _show(t: str) -> str:
    return {
        "attrs": "map(string, map(string, dyn))",
        "caps": "map(string, map(string, kubernetes.Quantity))",
        "attrs_in": "map(string, dyn)",
        "caps_in": "map(string, kubernetes.Quantity)",
        "semver": "kubernetes.Semver",
        "quantity": "kubernetes.Quantity",
        "device": "kubernetes.DRADevice",
        "null": "null_type",
    }.get(t, t)


def _unwrap(node: Any) -> Any:
    """Descend single-child wrapper nodes (expr -> conditionalor -> ... -> primary)."""
    while (
        isinstance(node, lark.Tree)
        and len(node.children) == 1
        and isinstance(node.children[0], lark.Tree)
        and str(node.data) != "paren_expr"
    ):
        node = node.children[0]
    return node


def _is_ident(node: Any) -> bool:
    node = _unwrap(node)
    return isinstance(node, lark.Tree) and str(node.data) == "ident"


def _ident_name(node: Any) -> str:
    return str(_unwrap(node).children[0])


def _is_selection(node: Any) -> bool:
    node = _unwrap(node)
    return isinstance(node, lark.Tree) and str(node.data) in ("member_dot", "member_index")


# --- The fast path ------------------------------------------------------------------


class _UnsupportedError(Exception):
    """The expression has a shape the fast path does not compile."""


def _literal_value(token: lark.Token) -> Value:
    kind = str(token.type)
    if kind == "STRING_LIT":
        return celstr(token)
    if kind == "INT_LIT":
        return celtypes.IntType(token.value)
    if kind == "BOOL_LIT":
        return celtypes.BoolType(token.value == "true")
    if kind == "FLOAT_LIT":
        return celtypes.DoubleType(token.value)
    if kind == "BYTES_LIT":
        return celbytes(token)
    raise _UnsupportedError(kind)


class _Const:
    """A compiled constant, so the compiler can fold literal-only calls."""

    def __init__(self, value: Value) -> None:
        self.value = value

    def __call__(self, device: DeviceView) -> Value:
        return self.value


def _attr_lookup(domain: str, name: str) -> Fn:
    def lookup(device: DeviceView) -> Value:
        try:
            return device.attributes.get(domain, _EMPTY)[name]
        except KeyError:
            raise _CelError(EvalErrorKind.NO_SUCH_KEY, f"no such key: {name}") from None

    return lookup


def _cap_lookup(domain: str, name: str) -> Fn:
    def lookup(device: DeviceView) -> Value:
        try:
            return device.capacity.get(domain, _EMPTY)[name]
        except KeyError:
            raise _CelError(EvalErrorKind.NO_SUCH_KEY, f"no such key: {name}") from None

    return lookup


def _eq_const(get: Fn, const: Value, negate: bool) -> Fn:
    if isinstance(const, str):
        text = str(const)

        def eq_str(device: DeviceView) -> bool:
            value = get(device)
            if isinstance(value, str):
                return (value == text) is not negate
            return negate

        return eq_str

    def eq(device: DeviceView) -> bool:
        return cel_eq(get(device), const) is not negate

    return eq


class _FastCompiler:
    """Selector parse tree -> Python closures, for the shapes selectors use in practice."""

    def compile(self, tree: _Tree) -> Fn | None:
        try:
            return self.node(tree)
        except _UnsupportedError:
            return None

    def node(self, tree: Any) -> Fn:
        if not isinstance(tree, lark.Tree):
            raise _UnsupportedError(repr(tree))
        method = getattr(self, "c_" + str(tree.data), None)
        if method is None:
            raise _UnsupportedError(str(tree.data))
        return cast(Fn, method(tree))

    def _single(self, tree: _Tree) -> Fn:
        if len(tree.children) != 1:
            raise _UnsupportedError(str(tree.data))
        return self.node(tree.children[0])

    c_addition = _single
    c_multiplication = _single
    c_member = _single
    c_primary = _single
    c_paren_expr = _single

    def c_expr(self, tree: _Tree) -> Fn:
        return self._single(tree)

    def c_literal(self, tree: _Tree) -> Fn:
        return _Const(_literal_value(_ident_token(tree.children[0])))

    def c_conditionalor(self, tree: _Tree) -> Fn:
        if len(tree.children) == 1:
            return self.node(tree.children[0])
        return _logic_fn(self.node(tree.children[0]), self.node(tree.children[1]), True)

    def c_conditionaland(self, tree: _Tree) -> Fn:
        if len(tree.children) == 1:
            return self.node(tree.children[0])
        return _logic_fn(self.node(tree.children[0]), self.node(tree.children[1]), False)

    def c_unary(self, tree: _Tree) -> Fn:
        kids = _children(tree)
        if len(kids) == 1:
            return self.node(kids[0])
        if str(kids[0].data) != "unary_not":
            raise _UnsupportedError("negation")
        operand = self.node(kids[1])

        def not_(device: DeviceView) -> bool:
            value = operand(device)
            if not _is_bool(value):
                raise _overload("!_", value)
            return not value

        return not_

    def c_relation(self, tree: _Tree) -> Fn:
        kids = _children(tree)
        if len(kids) == 1:
            return self.node(kids[0])
        op_tree, right_tree = kids
        kind = str(op_tree.data)
        left = self.node(op_tree.children[0])
        right = self.node(right_tree)
        if kind in ("relation_eq", "relation_ne"):
            negate = kind == "relation_ne"
            if isinstance(right, _Const):
                return _eq_const(left, right.value, negate)
            if isinstance(left, _Const):
                return _eq_const(right, left.value, negate)
            return lambda d: cel_eq(left(d), right(d)) is not negate
        if kind == "relation_in":
            return lambda d: cel_in(left(d), right(d))
        op = _REL_OPS[kind]
        test: Callable[[int], bool] = {
            "relation_lt": lambda c: c < 0,
            "relation_le": lambda c: c <= 0,
            "relation_gt": lambda c: c > 0,
            "relation_ge": lambda c: c >= 0,
        }[kind]
        return lambda d: test(cel_compare(op, left(d), right(d)))

    def c_member_dot(self, tree: _Tree) -> Fn:
        target_tree, name_token = tree.children
        return self._select(cast(_Tree, target_tree), str(name_token))

    def c_member_index(self, tree: _Tree) -> Fn:
        target_tree, index_tree = tree.children
        index = self.node(index_tree)
        if not isinstance(index, _Const) or not isinstance(index.value, str):
            raise _UnsupportedError("computed index")
        return self._select(cast(_Tree, target_tree), str(index.value))

    def _select(self, target_tree: _Tree, key: str) -> Fn:
        path = _device_path(target_tree)
        if path == ():
            if key == "driver":
                return lambda d: celtypes.StringType(d.driver)
            if key == "allowMultipleAllocations":

                def allow(device: DeviceView) -> Value:
                    if device.allow_multiple_allocations is None:
                        raise _CelError(EvalErrorKind.NO_SUCH_KEY, f"no such key: {key}")
                    return celtypes.BoolType(device.allow_multiple_allocations)

                return allow
            raise _UnsupportedError("device field")
        if path in (("attributes",), ("capacity",)):
            if path == ("attributes",):
                return lambda d: d.attributes.get(key, _EMPTY)
            return lambda d: d.capacity.get(key, _EMPTY)
        if path is not None and len(path) == 2 and path[0] in ("attributes", "capacity"):
            domain = path[1]
            return (_attr_lookup if path[0] == "attributes" else _cap_lookup)(domain, key)
        raise _UnsupportedError("selection")

    def c_member_dot_arg(self, tree: _Tree) -> Fn:
        kids = _children(tree)
        name = str(kids[1])
        if name not in METHODS or name in _MACROS:
            raise _UnsupportedError(name)
        target = self.node(kids[0])
        args = [self.node(a) for a in kids[2].children] if len(kids) > 2 and kids[2] else []
        return _call(METHODS[name], [target, *args])

    def c_ident_arg(self, tree: _Tree) -> Fn:
        kids = _children(tree)
        name = str(kids[0])
        if name not in FUNCTIONS:
            raise _UnsupportedError(name)
        args = [self.node(a) for a in kids[1].children] if len(kids) > 1 and kids[1] else []
        return _call(FUNCTIONS[name], args)


def _call(impl: Callable[..., Value], args: list[Fn]) -> Fn:
    if all(isinstance(a, _Const) for a in args):
        values = [cast(_Const, a).value for a in args]
        try:
            # Fold constant calls such as semver('1.2.3') once, at compile time.
            return _Const(_to_cel(impl(*values)))
        except _CelError:
            pass
    if len(args) == 1:
        (only,) = args
        return lambda d: _to_cel(impl(only(d)))
    if len(args) == 2:
        first, second = args
        return lambda d: _to_cel(impl(first(d), second(d)))
    return lambda d: _to_cel(impl(*(a(d) for a in args)))


def _logic_fn(left: Fn, right: Fn, short: bool) -> Fn:
    """CEL && / ||: either side deciding wins, else the first error, else no overload."""
    op = "_||_" if short else "_&&_"

    def logic(device: DeviceView) -> bool:
        try:
            a = left(device)
        except _CelError as error:
            a = error
        if a is short or (_is_bool(a) and bool(a) is short):
            return short
        try:
            b = right(device)
        except _CelError as error:
            b = error
        if b is short or (_is_bool(b) and bool(b) is short):
            return short
        for v in (a, b):
            if isinstance(v, _CelError):
                raise v
        if _is_bool(a) and _is_bool(b):
            return not short
        raise _overload(op, a, b)

    return logic


def _device_path(tree: Any) -> tuple[str, ...] | None:
    """device -> (); device.attributes -> ("attributes",); device.attributes['d'] -> (.., "d")."""
    node = _unwrap(tree)
    if not isinstance(node, lark.Tree):
        return None
    kind = str(node.data)
    if kind == "ident":
        return () if str(node.children[0]) == "device" else None
    if kind == "member_dot":
        base = _device_path(node.children[0])
        return None if base is None else (*base, str(node.children[1]))
    if kind == "member_index":
        base = _device_path(node.children[0])
        index = _unwrap(node.children[1])
        if base is None or not (isinstance(index, lark.Tree) and str(index.data) == "literal"):
            return None
        token = _ident_token(index.children[0])
        if str(token.type) != "STRING_LIT":
            return None
        return (*base, str(celstr(token)))
    return None


# --- Lint support ---------------------------------------------------------------------


def referenced_attributes(expression: str) -> set[tuple[str, str]]:
    """(domain, name) of every attribute the expression names literally; best effort.

    Covers `device.attributes['d'].name`, `device.attributes['d']['name']` and
    `'name' in device.attributes['d']`; computed keys are not followed.
    """
    tree = _parse(expression)
    found: set[tuple[str, str]] = set()
    for node in _walk(tree):
        kind = str(node.data)
        if kind in ("member_dot", "member_index"):
            path = _device_path(node)
            if path is not None and len(path) == 3 and path[0] == "attributes":
                found.add((path[1], path[2]))
        elif kind == "relation" and len(node.children) == 2:
            op_tree = node.children[0]
            if isinstance(op_tree, lark.Tree) and str(op_tree.data) == "relation_in":
                path = _device_path(node.children[1])
                item = _unwrap(op_tree.children[0])
                if (
                    path is not None
                    and len(path) == 2
                    and path[0] == "attributes"
                    and isinstance(item, lark.Tree)
                    and str(item.data) == "literal"
                    and str(_ident_token(item.children[0]).type) == "STRING_LIT"
                ):
                    found.add((path[1], str(celstr(_ident_token(item.children[0])))))
    return found


def _walk(tree: _Tree) -> Iterator[_Tree]:
    yield tree
    for child in tree.children:
        if isinstance(child, lark.Tree):
            yield from _walk(child)
