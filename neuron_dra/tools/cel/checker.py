"""Static checks: the Kubernetes type checker, where types are known statically.

Owns: `Checker`, which rejects undeclared names, unknown `device` fields,
operators and methods applied to mismatched types, and computes the result
type `compile_selector` requires to be bool or dyn; plus the type tables it
uses (shared with the fast path: the relation operators and the macros).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import lark

from neuron_dra.tools.cel.syntax import (
    ParseTree,
    child_nodes,
    ident_name,
    ident_token,
    is_ident,
    is_selection,
    source_position,
)
from neuron_dra.tools.cel.values import CelCompileError, CompileErrorKind

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
MACROS = {"all": "bool", "exists": "bool", "exists_one": "bool", "map": "list", "filter": "list"}
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
REL_OPS = {
    "relation_eq": "_==_",
    "relation_ne": "_!=_",
    "relation_lt": "_<_",
    "relation_le": "_<=_",
    "relation_gt": "_>_",
    "relation_ge": "_>=_",
    "relation_in": "@in",
}
_MAP_TYPES = {"attrs": "attrs_in", "caps": "caps_in", "attrs_in": "dyn", "caps_in": "quantity"}


class Checker:
    """Best-effort static typing in the style of the cel-go checker Kubernetes runs."""

    def __init__(self) -> None:
        self.bound: list[str] = []

    def fail(self, node: Any, message: str) -> CelCompileError:
        line, column = source_position(node)
        return CelCompileError(CompileErrorKind.TYPE, message, line, column)

    def check(self, tree: ParseTree) -> str:
        method = getattr(self, "t_" + str(tree.data), None)
        if method is None:
            # Constructs the selector grammar allows but this checker does not type.
            for child in tree.children:
                if isinstance(child, lark.Tree):
                    self.check(child)
            return "dyn"
        return cast(str, method(tree))

    def _single_or(self, tree: ParseTree, combine: Callable[[ParseTree], str]) -> str:
        kids = child_nodes(tree)
        return self.check(kids[0]) if len(kids) == 1 else combine(tree)

    def t_expr(self, tree: ParseTree) -> str:
        kids = child_nodes(tree)
        if len(kids) == 1:
            return self.check(kids[0])
        cond, yes, no = (self.check(k) for k in kids)
        if cond not in ("bool", "dyn"):
            raise self.fail(
                kids[0], f"found no matching overload for '_?_:_' applied to '({cond})'"
            )
        return yes if yes == no else "dyn"

    def _logic(self, tree: ParseTree, op: str) -> str:
        kids = child_nodes(tree)
        if len(kids) == 1:
            return self.check(kids[0])
        left, right = self.check(kids[0]), self.check(kids[1])
        for t in (left, right):
            if t not in ("bool", "dyn"):
                raise self.fail(
                    tree, f"found no matching overload for '{op}' applied to '({left}, {right})'"
                )
        return "bool"

    def t_conditionalor(self, tree: ParseTree) -> str:
        return self._logic(tree, "_||_")

    def t_conditionaland(self, tree: ParseTree) -> str:
        return self._logic(tree, "_&&_")

    def t_relation(self, tree: ParseTree) -> str:
        kids = child_nodes(tree)
        if len(kids) == 1:
            return self.check(kids[0])
        op_tree, right_tree = kids
        op = REL_OPS[str(op_tree.data)]
        left = self.check(op_tree.children[0])
        right = self.check(right_tree)
        self._operands(tree, op, left, right)
        return "bool"

    def _operands(self, tree: ParseTree, op: str, left: str, right: str) -> None:
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

    def t_addition(self, tree: ParseTree) -> str:
        return self._arith(tree, {"addition_add": "_+_", "addition_sub": "_-_"})

    def t_multiplication(self, tree: ParseTree) -> str:
        ops = {
            "multiplication_mul": "_*_",
            "multiplication_div": "_/_",
            "multiplication_mod": "_%_",
        }
        return self._arith(tree, ops)

    def _arith(self, tree: ParseTree, ops: dict[str, str]) -> str:
        kids = child_nodes(tree)
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

    def t_unary(self, tree: ParseTree) -> str:
        kids = child_nodes(tree)
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

    def t_member(self, tree: ParseTree) -> str:
        return self.check(tree.children[0])

    def t_primary(self, tree: ParseTree) -> str:
        return self.check(tree.children[0])

    def t_paren_expr(self, tree: ParseTree) -> str:
        return self.check(tree.children[0])

    def t_literal(self, tree: ParseTree) -> str:
        token = ident_token(tree.children[0])
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

    def t_list_lit(self, tree: ParseTree) -> str:
        for child in tree.children:
            if isinstance(child, lark.Tree):
                self.check(child)
        return "list"

    def t_map_lit(self, tree: ParseTree) -> str:
        for child in tree.children:
            if isinstance(child, lark.Tree):
                self.check(child)
        return "map"

    def t_exprlist(self, tree: ParseTree) -> str:
        for child in tree.children:
            self.check(child)
        return "list"

    def t_mapinits(self, tree: ParseTree) -> str:
        return self.t_exprlist(tree)

    def t_ident(self, tree: ParseTree) -> str:
        name = str(tree.children[0])
        if name == "device":
            return "device"
        if name in self.bound:
            return "dyn"
        raise self.fail(tree, f"undeclared reference to '{name}' (in container '')")

    def t_member_dot(self, tree: ParseTree) -> str:
        target_tree, name_token = tree.children
        name = str(name_token)
        target = self.check(cast(ParseTree, target_tree))
        if target == "device":
            if name not in _DEVICE_FIELDS:
                raise self.fail(name_token, f"undefined field '{name}'")
            return _DEVICE_FIELDS[name]
        if target in _MAP_TYPES:
            return _MAP_TYPES[target]
        if target in ("map", "dyn"):
            return "dyn"
        raise self.fail(name_token, f"type '{_show(target)}' does not support field selection")

    def t_member_index(self, tree: ParseTree) -> str:
        target_tree, index_tree = tree.children
        target = self.check(cast(ParseTree, target_tree))
        index = self.check(cast(ParseTree, index_tree))
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

    def t_member_dot_arg(self, tree: ParseTree) -> str:
        kids = child_nodes(tree)
        target_tree, name_token = kids[0], kids[1]
        args = list(kids[2].children) if len(kids) > 2 and kids[2] is not None else []
        name = str(name_token)
        if name in MACROS and args and is_ident(args[0]):
            self.check(target_tree)
            self.bound.append(ident_name(args[0]))
            try:
                for arg in args[1:]:
                    self.check(arg)
            finally:
                self.bound.pop()
            return MACROS[name]
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

    def t_ident_arg(self, tree: ParseTree) -> str:
        kids = child_nodes(tree)
        name = str(kids[0])
        args = list(kids[1].children) if len(kids) > 1 and kids[1] is not None else []
        if name == "has":
            if len(args) != 1 or not is_selection(args[0]):
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
