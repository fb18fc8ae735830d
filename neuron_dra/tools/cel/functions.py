"""The semantics both evaluators share, so the two paths cannot drift.

Owns: CEL equality, ordering, `in` and indexing as Kubernetes enables them
(heterogeneous equality, numbers compared across int/uint/double), the
Kubernetes function library (semver, quantity, the extended string library)
as `METHODS` and `FUNCTIONS`, and the conversion of Python results back to
celtypes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Final

from celpy import celtypes

from neuron_dra.tools.cel.values import CelError, EvalErrorKind, Quantity, Semver, Value

_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


def is_bool(v: Value) -> bool:
    return type(v) is bool or isinstance(v, celtypes.BoolType)


def _is_num(v: Value) -> bool:
    return isinstance(v, int | float) and not is_bool(v)


def type_name(v: Value) -> str:
    if is_bool(v):
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


def overload(op: str, *args: Value) -> CelError:
    types = ", ".join(type_name(a) for a in args)
    return CelError(EvalErrorKind.NO_SUCH_OVERLOAD, f"no such overload: {op}({types})")


def _native(v: Value) -> int | float:
    # celtypes refuse mixed int/double arithmetic; CEL compares numbers by value.
    return int(v) if isinstance(v, int) else float(v)


def cel_eq(a: Value, b: Value) -> bool:
    """CEL equality as Kubernetes enables it: values of different types are unequal."""
    if is_bool(a) or is_bool(b):
        return is_bool(a) and is_bool(b) and bool(a) == bool(b)
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
    if is_bool(a) and is_bool(b):
        p, q = bool(a), bool(b)
        return (p > q) - (p < q)
    if _is_num(a) and _is_num(b):
        x, y = _native(a), _native(b)
        return (x > y) - (x < y)
    if isinstance(a, str) and isinstance(b, str):
        return (a > b) - (a < b)
    if isinstance(a, bytes) and isinstance(b, bytes):
        return (a > b) - (a < b)
    raise overload(op, a, b)


def cel_in(item: Value, container: Value) -> bool:
    if isinstance(container, Mapping):
        return item in container if isinstance(item, str | int) else False
    if isinstance(container, list):
        return any(cel_eq(item, x) for x in container)
    raise overload("@in", item, container)


def cel_select(container: Value, key: Value) -> Value:
    """container[key] and container.key."""
    if isinstance(container, Mapping):
        try:
            return container[key]
        except KeyError:
            raise CelError(EvalErrorKind.NO_SUCH_KEY, f"no such key: {key}") from None
    if isinstance(container, list) and isinstance(key, int) and not is_bool(key):
        if 0 <= key < len(container):
            return container[key]
        raise CelError(EvalErrorKind.INVALID_ARGUMENT, f"index out of range: {key}")
    raise overload("_[_]", container, key)


def _want(op: str, check: Callable[[Value], bool], *args: Value) -> None:
    if not all(check(a) for a in args):
        raise overload(op, *args)


def _is_str(v: Value) -> bool:
    return isinstance(v, str)


def _is_int(v: Value) -> bool:
    return isinstance(v, int) and not is_bool(v)


def _semver(text: Value, normalize: Value = False) -> Semver:
    _want("semver", _is_str, text)
    try:
        return Semver.parse(str(text), normalize=bool(normalize))
    except ValueError as error:
        raise CelError(EvalErrorKind.INVALID_ARGUMENT, f"semver: {error}") from None


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
        raise CelError(EvalErrorKind.INVALID_ARGUMENT, f"quantity: {error}") from None


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
    raise overload("compareTo", a, b)


def _greater(a: Value, b: Value) -> bool:
    if type(a) is not type(b) or not isinstance(a, Semver | Quantity):
        raise overload("isGreaterThan", a, b)
    return _compare_to(a, b) > 0


def _less(a: Value, b: Value) -> bool:
    if type(a) is not type(b) or not isinstance(a, Semver | Quantity):
        raise overload("isLessThan", a, b)
    return _compare_to(a, b) < 0


def _semver_part(name: str) -> Callable[[Value], int]:
    def part(v: Value) -> int:
        if not isinstance(v, Semver):
            raise overload(name, v)
        return int(getattr(v, name))

    return part


def _as_integer(q: Value) -> int:
    if not isinstance(q, Quantity):
        raise overload("asInteger", q)
    if q.value.denominator != 1 or not _INT64_MIN <= q.value <= _INT64_MAX:
        raise CelError(EvalErrorKind.INVALID_ARGUMENT, "cannot convert value to integer")
    return int(q.value)


def _is_integer(q: Value) -> bool:
    if not isinstance(q, Quantity):
        raise overload("isInteger", q)
    return q.value.denominator == 1 and _INT64_MIN <= q.value <= _INT64_MAX


def _as_float(q: Value) -> float:
    if not isinstance(q, Quantity):
        raise overload("asApproximateFloat", q)
    return float(q.value)


def _sign(q: Value) -> int:
    if not isinstance(q, Quantity):
        raise overload("sign", q)
    return (q.value > 0) - (q.value < 0)


def _q_arith(name: str, direction: int) -> Callable[[Value, Value], Quantity]:
    def arith(q: Value, other: Value) -> Quantity:
        if not isinstance(q, Quantity) or not (isinstance(other, Quantity) or _is_int(other)):
            raise overload(name, q, other)
        delta = other.value if isinstance(other, Quantity) else Fraction(int(other))
        value = q.value + direction * delta
        return Quantity(value, str(value))

    return arith


def _str_method(name: str, impl: Callable[..., Value], arity: int) -> Callable[..., Value]:
    def method(target: Value, *args: Value) -> Value:
        if not isinstance(target, str) or len(args) != arity or not all(_is_str(a) for a in args):
            raise overload(name, target, *args)
        return impl(str(target), *(str(a) for a in args))

    return method


def _matches(target: Value, pattern: Value) -> bool:
    _want("matches", _is_str, target, pattern)
    try:
        return re.search(str(pattern), str(target)) is not None
    except re.error as error:
        raise CelError(
            EvalErrorKind.INVALID_ARGUMENT, f"invalid regular expression: {error}"
        ) from None


def _size(v: Value) -> int:
    if isinstance(v, str | bytes | list | Mapping):
        return len(v)
    raise overload("size", v)


def _char_at(target: Value, index: Value) -> str:
    if not isinstance(target, str) or not _is_int(index):
        raise overload("charAt", target, index)
    if not 0 <= index <= len(target):
        raise CelError(EvalErrorKind.INVALID_ARGUMENT, f"index out of range: {index}")
    return str(target)[index : index + 1]


def _substring(target: Value, start: Value, end: Value = None) -> str:
    stop = len(target) if end is None and isinstance(target, str) else end
    if not isinstance(target, str) or not _is_int(start) or not _is_int(stop):
        raise overload("substring", target, start)
    if not 0 <= start <= stop <= len(target):
        raise CelError(EvalErrorKind.INVALID_ARGUMENT, f"substring out of range: {start}, {stop}")
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


def to_cel(value: Value) -> Value:
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
