"""Every place the docs invoke `helm` or `neuron-dra`, as argument lists with the
placeholders filled: the commands of the code blocks (`doc_commands`) and those written
inline in the prose (`` `neuron-dra lint my-claims.yaml` ``), each program where it
starts in a line (first, after `sudo`, a pipe, `--` of `kubectl exec`, or in `<(...)`),
up to the shell's next operator.

A placeholder (`<registry>`), a metavariable (`FILE...`) or an elided value (`=...`)
this module does not know fails the lookup, so a new one is added here, with a value
the programs accept; an inline mention that elides arguments (`helm upgrade ...
--set <value>=<new>`) is left out.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from tests.doc_commands import PAGES, REPO, commands

PROGRAMS = ("helm", "neuron-dra")
# Values a reader puts in for a placeholder, a metavariable or an elided `--set` value.
PLACEHOLDERS = {
    "registry": "registry.example/ml",
    "version": "0.1.0",
    "image": "registry.example/ml/neuron-dra:0.1.0",
}
METAVARIABLES = {"FILE": "claims.yaml", "FILE...": "claims.yaml", "SHELL": "bash"}
ELIDED = {"image.repository": "registry.example/ml/neuron-dra", "image.tag": "0.1.0"}
_OPERATORS = {"|", "||", "&&", ";", "<", ">", ">>", "2>", "2>&1", "&"}
_STARTS = _OPERATORS | {"--", "sudo"}
_SPAN = re.compile(r"`((?:helm|neuron-dra|kubectl exec|sudo) [^`]*)`")
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Invocation:
    where: str  # page:line
    program: str
    args: tuple[str, ...]  # after the program, placeholders filled

    def __str__(self) -> str:
        return f"{self.where}: {self.program} {shlex.join(self.args)}"


def _filled(token: str) -> str:
    token = re.sub(r"<([\w-]+)>", lambda m: PLACEHOLDERS[m.group(1)], token)
    if token in METAVARIABLES:
        return METAVARIABLES[token]
    if token.isupper() and token.rstrip(".").isalpha():
        raise KeyError(f"metavariable {token}: add it to METAVARIABLES")
    key, equals, value = token.partition("=")
    if equals and value == "...":
        return f"{key}={ELIDED[key]}"
    return token


def invocations_in(where: str, text: str) -> list[Invocation]:
    tokens = shlex.split(text)
    found = []
    for i, token in enumerate(tokens):
        program = token.removeprefix("<(")
        starts = i == 0 or tokens[i - 1] in _STARTS or token.startswith("<(")
        if program not in PROGRAMS or not starts:
            continue
        args = []
        for arg in tokens[i + 1 :]:
            if arg in _OPERATORS:
                break
            args.append(arg)
        if token.startswith("<(") and args:
            args[-1] = args[-1].removesuffix(")")
        found.append(Invocation(where, program, tuple(_filled(a) for a in args)))
    return found


def _mentions() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = page.read_text()
        # Blocks out, lines kept: `commands` reads them.
        prose = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for span in _SPAN.finditer(prose):
            mention = " ".join(span.group(1).split())
            if " ... " in f"{mention} " or "…" in mention:
                continue  # arguments left out: not a whole command
            line = prose.count("\n", 0, span.start()) + 1
            found.append((f"{page.relative_to(REPO)}:{line}", mention))
    return found


def invocations(program: str) -> list[Invocation]:
    """Every invocation of `program` in the docs, the code blocks' and the prose's."""
    written = [(f"{c.page}:{c.line}", c.text) for c in commands()] + _mentions()
    return [
        i for where, text in written for i in invocations_in(where, text) if i.program == program
    ]


def alternatives(args: tuple[str, ...]) -> list[tuple[str, ...]]:
    """`--neuron-cores on|off` as each of the commands it stands for."""
    for n, arg in enumerate(args):
        if "|" in arg and not arg.startswith("-"):
            return [
                variant
                for choice in arg.split("|")
                for variant in alternatives((*args[:n], choice, *args[n + 1 :]))
            ]
    return [args]
