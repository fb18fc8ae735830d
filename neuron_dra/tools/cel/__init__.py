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

Owns: CEL device selectors with Kubernetes DRA semantics, the two evaluation
paths, the static checker, and the attribute references `lint` reads. May use:
nothing else of the driver; needs cel-python (and its lark parser) from the
`tools` extra (`pip install -e '.[tools]'` in a clone).

Modules, each importing only those before it: `values` (Semver, Quantity, the
errors), `device` (DeviceView), `functions` (the shared semantics and the
Kubernetes function library), `syntax` (parsing, parse-tree helpers),
`general` (celpy), `checker` (static types), `fast` (closures), `selector`
(compile_selector, Selector, referenced_attributes).
"""

from __future__ import annotations

from neuron_dra.tools.cel.device import DeviceView
from neuron_dra.tools.cel.selector import (
    MAX_EXPRESSION_BYTES,
    Selector,
    compile_selector,
    referenced_attributes,
)
from neuron_dra.tools.cel.values import (
    CelCompileError,
    CelEvalError,
    CompileErrorKind,
    EvalErrorKind,
    Quantity,
    Semver,
)

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
