""" "Did you mean" for the commonest slips in a claim's CEL selectors: `=` written for
`==` (a syntax error), and an attribute some devices lack read without `has()` (a
runtime error on those devices, which fails the pod's scheduling).

Each hint is an expression that compiles, so it can be pasted as it stands.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from neuron_dra.tools.cel import CelCompileError, compile_selector

# A quoted CEL string, kept apart so an `=` inside one is never touched.
_STRING = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
# `=` that is not part of `==`, `!=`, `<=` or `>=`.
_SINGLE_EQUALS = re.compile(r"(?<![=!<>])=(?!=)")


def equals_for_assignment(expression: str) -> str | None:
    """`expression` with each lone `=` as `==`, if that is what makes it compile."""
    parts = _STRING.split(expression)
    fixed = "".join(
        part if i % 2 else _SINGLE_EQUALS.sub("==", part) for i, part in enumerate(parts)
    )
    if fixed == expression:
        return None
    try:
        compile_selector(fixed)
    except CelCompileError:
        return None
    return fixed


def guarded(expression: str, missing: Iterable[tuple[str, str]]) -> str | None:
    """`expression` behind a `has()` of each attribute in `missing` it does not test yet."""
    guards = [
        f"has(device.attributes['{domain}'].{name})"
        for domain, name in sorted(missing)
        if name.isidentifier() and f"device.attributes['{domain}'].{name})" not in expression
    ]
    if not guards:
        return None
    return f"{' && '.join(guards)} && ({expression})"
