"""Parsing a selector, and reading the parse tree both the checker and the fast path walk.

Owns: the celpy environment every selector is parsed and built with (and the
celpy log level), syntax errors as `CelCompileError`, and the helpers over
celpy's lark parse tree: source positions, tokens and unwrapping the grammar's
single-child wrapper nodes.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import celpy
import lark
from celpy.celparser import CELParseError

from neuron_dra.tools.cel.values import CelCompileError, CompileErrorKind

# celpy logs every evaluation error at debug level through its own loggers and
# prints transpiler internals at info level; selectors that fail are normal here.
logging.getLogger("celpy").setLevel(logging.WARNING)

ENV = celpy.Environment()
ParseTree = lark.Tree[Any]


def parse_expression(expression: str) -> ParseTree:
    try:
        return ENV.compile(expression)
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


def source_position(tree: ParseTree | lark.Token) -> tuple[int, int]:
    if isinstance(tree, lark.Token):
        return tree.line or 1, tree.column or 1
    for token in tree.scan_values(lambda t: isinstance(t, lark.Token)):
        return token.line or 1, token.column or 1
    return 1, 1


def child_nodes(tree: ParseTree) -> list[Any]:
    return list(tree.children)


def ident_token(tree: Any) -> lark.Token:
    return cast(lark.Token, tree)


def unwrap(node: Any) -> Any:
    """Descend single-child wrapper nodes (expr -> conditionalor -> ... -> primary)."""
    while (
        isinstance(node, lark.Tree)
        and len(node.children) == 1
        and isinstance(node.children[0], lark.Tree)
        and str(node.data) != "paren_expr"
    ):
        node = node.children[0]
    return node


def is_ident(node: Any) -> bool:
    node = unwrap(node)
    return isinstance(node, lark.Tree) and str(node.data) == "ident"


def ident_name(node: Any) -> str:
    return str(unwrap(node).children[0])


def is_selection(node: Any) -> bool:
    node = unwrap(node)
    return isinstance(node, lark.Tree) and str(node.data) in ("member_dot", "member_index")
