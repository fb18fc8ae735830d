"""The fast path: selectors compiled to Python closures over a prebuilt DeviceView.

Owns: `FastCompiler`, which compiles the common selector shapes (attribute
and capacity lookups, literals, comparisons, `in`, `!`, `&&`, `||`, the
Kubernetes methods and functions, constant calls folded at compile time) and
gives up (None) on anything else, leaving it to the general path. celpy
re-walks its parse tree and rebuilds an activation on every evaluation, far
too slow for a cluster's worth of devices. Also `device_path`, which names
the `device` member an expression selects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, cast

import lark
from celpy import celtypes
from celpy.evaluation import celbytes, celstr

from neuron_dra.tools.cel.checker import MACROS, REL_OPS
from neuron_dra.tools.cel.device import DeviceView
from neuron_dra.tools.cel.functions import (
    FUNCTIONS,
    METHODS,
    cel_compare,
    cel_eq,
    cel_in,
    is_bool,
    overload,
    to_cel,
)
from neuron_dra.tools.cel.syntax import ParseTree, child_nodes, ident_token, unwrap
from neuron_dra.tools.cel.values import CelError, EvalErrorKind, Value

Fn = Callable[[DeviceView], Value]

_EMPTY: Final[Mapping[str, Value]] = {}


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
            raise CelError(EvalErrorKind.NO_SUCH_KEY, f"no such key: {name}") from None

    return lookup


def _cap_lookup(domain: str, name: str) -> Fn:
    def lookup(device: DeviceView) -> Value:
        try:
            return device.capacity.get(domain, _EMPTY)[name]
        except KeyError:
            raise CelError(EvalErrorKind.NO_SUCH_KEY, f"no such key: {name}") from None

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


class FastCompiler:
    """Selector parse tree -> Python closures, for the shapes selectors use in practice."""

    def compile(self, tree: ParseTree) -> Fn | None:
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

    def _single(self, tree: ParseTree) -> Fn:
        if len(tree.children) != 1:
            raise _UnsupportedError(str(tree.data))
        return self.node(tree.children[0])

    c_addition = _single
    c_multiplication = _single
    c_member = _single
    c_primary = _single
    c_paren_expr = _single

    def c_expr(self, tree: ParseTree) -> Fn:
        return self._single(tree)

    def c_literal(self, tree: ParseTree) -> Fn:
        return _Const(_literal_value(ident_token(tree.children[0])))

    def c_conditionalor(self, tree: ParseTree) -> Fn:
        if len(tree.children) == 1:
            return self.node(tree.children[0])
        return _logic_fn(self.node(tree.children[0]), self.node(tree.children[1]), True)

    def c_conditionaland(self, tree: ParseTree) -> Fn:
        if len(tree.children) == 1:
            return self.node(tree.children[0])
        return _logic_fn(self.node(tree.children[0]), self.node(tree.children[1]), False)

    def c_unary(self, tree: ParseTree) -> Fn:
        kids = child_nodes(tree)
        if len(kids) == 1:
            return self.node(kids[0])
        if str(kids[0].data) != "unary_not":
            raise _UnsupportedError("negation")
        operand = self.node(kids[1])

        def not_(device: DeviceView) -> bool:
            value = operand(device)
            if not is_bool(value):
                raise overload("!_", value)
            return not value

        return not_

    def c_relation(self, tree: ParseTree) -> Fn:
        kids = child_nodes(tree)
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
        op = REL_OPS[kind]
        test: Callable[[int], bool] = {
            "relation_lt": lambda c: c < 0,
            "relation_le": lambda c: c <= 0,
            "relation_gt": lambda c: c > 0,
            "relation_ge": lambda c: c >= 0,
        }[kind]
        return lambda d: test(cel_compare(op, left(d), right(d)))

    def c_member_dot(self, tree: ParseTree) -> Fn:
        target_tree, name_token = tree.children
        return self._select(cast(ParseTree, target_tree), str(name_token))

    def c_member_index(self, tree: ParseTree) -> Fn:
        target_tree, index_tree = tree.children
        index = self.node(index_tree)
        if not isinstance(index, _Const) or not isinstance(index.value, str):
            raise _UnsupportedError("computed index")
        return self._select(cast(ParseTree, target_tree), str(index.value))

    def _select(self, target_tree: ParseTree, key: str) -> Fn:
        path = device_path(target_tree)
        if path == ():
            if key == "driver":
                return lambda d: celtypes.StringType(d.driver)
            if key == "allowMultipleAllocations":

                def allow(device: DeviceView) -> Value:
                    if device.allow_multiple_allocations is None:
                        raise CelError(EvalErrorKind.NO_SUCH_KEY, f"no such key: {key}")
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

    def c_member_dot_arg(self, tree: ParseTree) -> Fn:
        kids = child_nodes(tree)
        name = str(kids[1])
        if name not in METHODS or name in MACROS:
            raise _UnsupportedError(name)
        target = self.node(kids[0])
        args = [self.node(a) for a in kids[2].children] if len(kids) > 2 and kids[2] else []
        return _call(METHODS[name], [target, *args])

    def c_ident_arg(self, tree: ParseTree) -> Fn:
        kids = child_nodes(tree)
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
            return _Const(to_cel(impl(*values)))
        except CelError:
            pass
    if len(args) == 1:
        (only,) = args
        return lambda d: to_cel(impl(only(d)))
    if len(args) == 2:
        first, second = args
        return lambda d: to_cel(impl(first(d), second(d)))
    return lambda d: to_cel(impl(*(a(d) for a in args)))


def _logic_fn(left: Fn, right: Fn, short: bool) -> Fn:
    """CEL && / ||: either side deciding wins, else the first error, else no overload."""
    op = "_||_" if short else "_&&_"

    def logic(device: DeviceView) -> bool:
        try:
            a = left(device)
        except CelError as error:
            a = error
        if a is short or (is_bool(a) and bool(a) is short):
            return short
        try:
            b = right(device)
        except CelError as error:
            b = error
        if b is short or (is_bool(b) and bool(b) is short):
            return short
        for v in (a, b):
            if isinstance(v, CelError):
                raise v
        if is_bool(a) and is_bool(b):
            return not short
        raise overload(op, a, b)

    return logic


def device_path(tree: Any) -> tuple[str, ...] | None:
    """device -> (); device.attributes -> ("attributes",); device.attributes['d'] -> (.., "d")."""
    node = unwrap(tree)
    if not isinstance(node, lark.Tree):
        return None
    kind = str(node.data)
    if kind == "ident":
        return () if str(node.children[0]) == "device" else None
    if kind == "member_dot":
        base = device_path(node.children[0])
        return None if base is None else (*base, str(node.children[1]))
    if kind == "member_index":
        base = device_path(node.children[0])
        index = unwrap(node.children[1])
        if base is None or not (isinstance(index, lark.Tree) and str(index.data) == "literal"):
            return None
        token = ident_token(index.children[0])
        if str(token.type) != "STRING_LIT":
            return None
        return (*base, str(celstr(token)))
    return None
