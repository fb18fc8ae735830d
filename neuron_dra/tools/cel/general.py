"""The general path: cel-python's interpreter given the Kubernetes extensions.

Owns: the shared semantics wrapped as celpy functions (errors travel as celpy
error values tagged with their kind), `&&`/`||`/`!` with Kubernetes' strict
typing and commutative errors, and the mapping of celpy's own errors onto
`EvalErrorKind`. It evaluates every selector correctly but slowly; it is the
reference the fast path is tested against.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from celpy import celtypes
from celpy.evaluation import CELEvalError as _CelpyError

from neuron_dra.tools.cel.functions import (
    FUNCTIONS,
    METHODS,
    cel_compare,
    cel_eq,
    cel_in,
    cel_select,
    is_bool,
    overload,
    to_cel,
)
from neuron_dra.tools.cel.values import CelError, EvalErrorKind, Value


class _KindTagError(Exception):
    """Carries an EvalErrorKind through a celpy error value."""


def _celpy_function(impl: Callable[..., Value]) -> Callable[..., Value]:
    def call(*args: Value) -> Value:
        for arg in args:
            if isinstance(arg, _CelpyError):
                return arg
        try:
            return to_cel(impl(*args))
        except CelError as error:
            return _CelpyError(error.message, _KindTagError, (error.kind.value,))

    call.__name__ = getattr(impl, "__name__", "function")
    return call


def _logical(op: str, short: bool) -> Callable[[Value, Value], Value]:
    """CEL && (short=False) and || (short=True): commutative over errors, strict on types."""

    def logical(a: Value, b: Value) -> Value:
        for v in (a, b):
            if is_bool(v) and bool(v) is short:
                return celtypes.BoolType(short)
        for v in (a, b):
            if isinstance(v, _CelpyError):
                return v
        for v in (a, b):
            if not is_bool(v):
                error = overload(op, a, b)
                return _CelpyError(error.message, _KindTagError, (error.kind.value,))
        return celtypes.BoolType(not short)

    return logical


def _not(a: Value) -> Value:
    if isinstance(a, _CelpyError):
        return a
    if not is_bool(a):
        error = overload("!_", a)
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
        except CelError:
            return function(*args)

    return call


CELPY_FUNCTIONS = _celpy_functions()


_MISSING = re.compile(r"no such member in mapping: (?:StringType\()?'([^']*)'")


def celpy_error_kind(error: _CelpyError) -> tuple[EvalErrorKind, str]:
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
