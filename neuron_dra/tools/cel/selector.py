"""The entry points: compile a selector, evaluate it, and read what it names.

Owns: `compile_selector` (length limit -> parse -> static check -> the celpy
program and, where the shape allows, the fast closures), `Selector` (the fast
path when there is one, the general path otherwise, and either way the result
must be a bool), and `referenced_attributes` for `lint`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import lark
from celpy.evaluation import CELEvalError as _CelpyError
from celpy.evaluation import celstr

from neuron_dra.tools.cel.checker import Checker
from neuron_dra.tools.cel.device import DeviceView
from neuron_dra.tools.cel.fast import FastCompiler, Fn, device_path
from neuron_dra.tools.cel.functions import is_bool, type_name
from neuron_dra.tools.cel.general import CELPY_FUNCTIONS, celpy_error_kind
from neuron_dra.tools.cel.syntax import (
    ENV,
    ParseTree,
    ident_token,
    parse_expression,
    source_position,
    unwrap,
)
from neuron_dra.tools.cel.values import (
    CelCompileError,
    CelError,
    CelEvalError,
    CompileErrorKind,
    EvalErrorKind,
)

MAX_EXPRESSION_BYTES: Final = 10 * 1024
"""resource.k8s.io CELSelectorExpressionMaxLength."""


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
            kind, message = celpy_error_kind(error)
            raise CelEvalError(kind, message) from None
        if isinstance(result, _CelpyError):
            kind, message = celpy_error_kind(result)
            raise CelEvalError(kind, message)
        if not is_bool(result):
            raise CelEvalError(
                EvalErrorKind.NOT_BOOL,
                f"CEL result of type {type_name(result)} could not be converted to bool",
            )
        return bool(result)


def _finish(fn: Fn, device: DeviceView) -> bool:
    try:
        result = fn(device)
    except CelError as error:
        raise CelEvalError(error.kind, error.message) from None
    if result is True or result is False:
        return result
    if not is_bool(result):
        raise CelEvalError(
            EvalErrorKind.NOT_BOOL,
            f"CEL result of type {type_name(result)} could not be converted to bool",
        )
    return bool(result)


@functools.lru_cache(maxsize=1024)
def compile_selector(expression: str) -> Selector:
    """Parse, type-check and prepare a selector; raises CelCompileError.

    Kept per expression (a Selector is immutable): a file of many claims repeats a few
    selectors, and parsing one takes a millisecond or more."""
    size = len(expression.encode())
    if size > MAX_EXPRESSION_BYTES:
        raise CelCompileError(
            CompileErrorKind.TOO_LONG,
            f"expression is {size} bytes, longer than the limit of {MAX_EXPRESSION_BYTES}",
            1,
            1,
        )
    tree = parse_expression(expression)
    result_type = Checker().check(tree)
    if result_type not in ("bool", "dyn"):
        line, column = source_position(tree)
        raise CelCompileError(
            CompileErrorKind.NOT_BOOL,
            f"must evaluate to bool or the unknown type, not {result_type}",
            line,
            column,
        )
    program = ENV.program(tree, functions=CELPY_FUNCTIONS)
    return Selector(expression, FastCompiler().compile(tree), program)


# --- Lint support ---------------------------------------------------------------------


def referenced_attributes(expression: str) -> set[tuple[str, str]]:
    """(domain, name) of every attribute the expression names literally; best effort.

    Covers `device.attributes['d'].name`, `device.attributes['d']['name']` and
    `'name' in device.attributes['d']`; computed keys are not followed.
    """
    return set(_referenced(expression))


@functools.lru_cache(maxsize=1024)
def _referenced(expression: str) -> frozenset[tuple[str, str]]:
    tree = parse_expression(expression)
    found: set[tuple[str, str]] = set()
    for node in _walk(tree):
        kind = str(node.data)
        if kind in ("member_dot", "member_index"):
            path = device_path(node)
            if path is not None and len(path) == 3 and path[0] == "attributes":
                found.add((path[1], path[2]))
        elif kind == "relation" and len(node.children) == 2:
            op_tree = node.children[0]
            if isinstance(op_tree, lark.Tree) and str(op_tree.data) == "relation_in":
                path = device_path(node.children[1])
                item = unwrap(op_tree.children[0])
                if (
                    path is not None
                    and len(path) == 2
                    and path[0] == "attributes"
                    and isinstance(item, lark.Tree)
                    and str(item.data) == "literal"
                    and str(ident_token(item.children[0]).type) == "STRING_LIT"
                ):
                    found.add((path[1], str(celstr(ident_token(item.children[0])))))
    return frozenset(found)


def _walk(tree: ParseTree) -> Iterator[ParseTree]:
    yield tree
    for child in tree.children:
        if isinstance(child, lark.Tree):
            yield from _walk(child)
