"""Manifest files as `lint` and `simulate` read them: the objects, each with its line.

A file is read whole, at most `MAX_FILE_BYTES`, with libyaml's parser where PyYAML
has it (about 8 times faster than the pure-Python one). Each document is kept with
the line it starts on, Lists unpacked item by item. What the tools cannot read is a
`Problem` naming the file and line, never skipped in silence: a file with no
document, a document that is a list or a scalar, a claim, DeviceClass,
DeviceTaintRule or PodGroup in an API version the tools do not know, a kind close
to one they read (a misspelling), a file with nothing they read at all. Other Kubernetes objects
(a Service beside the claims) are left out quietly.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path as FilePath
from typing import Any

import yaml

from neuron_dra.tools import apischema

Json = dict[str, Any]

# Far above any manifest (the API server takes at most 3 MiB a request), and small
# enough to read in seconds (docs/contributors/performance.md). A larger file is refused
# before it is parsed.
MAX_FILE_BYTES = 8 * 1024 * 1024
STDIN = "-"  # a file name that reads standard input, as kubectl's `-f -`
RESOURCE_GROUP = apischema.GROUP
RESOURCE_KINDS = ("ResourceClaimTemplate", "ResourceClaim", "DeviceClass")
# Workloads whose pods come from spec.template (CronJob: spec.jobTemplate.spec.template).
WORKLOAD_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job")
POD_KINDS = ("Pod", *WORKLOAD_KINDS, "CronJob", "LeaderWorkerSet")
# DeviceTaintRules, for `simulate`, in the versions Kubernetes serves them (1.37, 1.36, 1.34).
TAINT_RULE_KIND = "DeviceTaintRule"
TAINT_RULE_VERSIONS = ("v1", "v1beta2", "v1alpha3")
# PodGroups (gangs), for `simulate`, as Kubernetes 1.37 serves them.
POD_GROUP_KIND = "PodGroup"
POD_GROUP_VERSIONS = ("scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha3")
# Kinds `simulate` reads beside the claims and workloads, each with its apiVersions.
CLUSTER_KINDS = {
    TAINT_RULE_KIND: tuple(f"{RESOURCE_GROUP}/{v}" for v in TAINT_RULE_VERSIONS),
    POD_GROUP_KIND: POD_GROUP_VERSIONS,
}
READ_KINDS = (*RESOURCE_KINDS, *CLUSTER_KINDS, *POD_KINDS)
# Kinds of Kubernetes that look like one the tools read but are not a misspelling of it.
OTHER_KINDS = frozenset(
    {
        "ResourceSlice",
        "ResourceClass",
        "ResourceClaimParameters",
        "ResourceQuota",
        "PodTemplate",
        "ReplicationController",
        "Workload",
        "PodMonitor",
        "PodDisruptionBudget",
        "ControllerRevision",
        "DeviceClassParameters",
    }
)
KIND_CUTOFF = 0.8  # difflib ratio from which an unknown kind is taken for a misspelling

# libyaml's loader where PyYAML was built with it.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


Path = tuple[str | int, ...]  # keys and list indices from the object's root: ("spec", 0)


@dataclass(frozen=True)
class Document:
    file: str
    line: int  # 1-based, where the object starts
    body: Json
    # The line of each field and list item (its key's, or its dash's), where the YAML
    # reader saw one: findings point at the field, not the object.
    lines: Mapping[Path, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        at = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{at}: {self.message}"


def supported_versions() -> tuple[str, ...]:
    """`resource.k8s.io/v1`, ...: the versions whose claims the tools read."""
    return tuple(f"{RESOURCE_GROUP}/{v}" for v in apischema.versions())


def read_all(paths: Iterable[FilePath]) -> tuple[list[Document], list[Problem]]:
    documents: list[Document] = []
    problems: list[Problem] = []
    for path in paths:
        found, wrong = read(path)
        documents += found
        problems += wrong
    return documents, problems


def file_name(path: FilePath) -> str:
    """How findings name `path`: `<stdin>` for `-`."""
    return "<stdin>" if str(path) == STDIN else str(path)


def read(path: FilePath) -> tuple[list[Document], list[Problem]]:
    """The objects of `path` (`-`: standard input) the tools read, and why any part of
    it cannot be read."""
    file = file_name(path)
    try:
        if str(path) == STDIN:
            data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
        else:
            with path.open("rb") as stream:
                data = stream.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        return [], [Problem(file, None, err.strerror or str(err))]
    if len(data) > MAX_FILE_BYTES:
        return [], [
            Problem(
                file,
                None,
                f"larger than {MAX_FILE_BYTES // 2**20} MiB, more than these tools read; "
                "split it into several files",
            )
        ]
    try:
        text = data.decode()
    except UnicodeDecodeError as err:
        return [], [Problem(file, None, f"not UTF-8 text: {err.reason} at byte {err.start}")]
    reader = _Reader(file)
    reader.parse(text)
    return reader.documents, reader.problems


class _Reader:
    def __init__(self, file: str) -> None:
        self.file = file
        self.documents: list[Document] = []
        self.problems: list[Problem] = []
        self.seen = 0  # documents, empty ones left out
        self.others: set[str] = set()  # kinds of objects not for these tools

    def problem(self, line: int | None, message: str) -> None:
        self.problems.append(Problem(self.file, line, message))

    def parse(self, text: str) -> None:
        loader = _LOADER(text)
        try:
            while loader.check_node():
                node = loader.get_node()
                if _null(node):
                    continue  # `---` with nothing after it
                self.seen += 1
                self.node(loader, node)
        except yaml.YAMLError as err:
            self.problem(*_yaml_problem(err))
            return
        finally:
            loader.dispose()
        if not self.seen:
            self.problem(None, "no YAML document: the file is empty")
        elif not self.documents and not self.problems:
            others = f"; only {', '.join(sorted(self.others))}" if self.others else ""
            self.problem(None, f"nothing these tools read ({', '.join(READ_KINDS)}){others}")

    def node(self, loader: Any, node: yaml.Node) -> None:
        line = node.start_mark.line + 1
        if isinstance(node, yaml.SequenceNode):
            self.problem(line, "a YAML list, not a Kubernetes object (a mapping with a kind)")
            return
        if isinstance(node, yaml.ScalarNode):
            self.problem(line, "a YAML scalar, not a Kubernetes object (a mapping with a kind)")
            return
        body = loader.construct_document(node)
        if not isinstance(body, dict):
            self.problem(line, "not a Kubernetes object (a mapping with a kind)")
            return
        kind = body.get("kind")
        if kind == "List" and isinstance(body.get("items"), list):
            items = _value_node(node, "items")
            lines = [i.start_mark.line + 1 for i in items.value] if items else []
            if len(lines) != len(body["items"]):  # no node of them found: the List's line
                lines = [line] * len(body["items"])
            item_nodes = items.value if items and len(items.value) == len(body["items"]) else []
            for i, (item, item_line) in enumerate(zip(body["items"], lines, strict=True)):
                self.object(item, item_line, item_nodes[i] if item_nodes else None)
            return
        self.object(body, line, node)

    def object(self, body: object, line: int, node: yaml.Node | None = None) -> None:
        if not isinstance(body, dict):
            self.problem(line, "a List item that is not a Kubernetes object")
            return
        kind, version = body.get("kind"), body.get("apiVersion")
        if not kind or not isinstance(kind, str):
            self.problem(line, "no kind: not a Kubernetes object")
            return
        if kind in RESOURCE_KINDS:
            supported = supported_versions()
            if version not in supported:
                said = "no apiVersion" if version is None else f"apiVersion {version}"
                self.problem(
                    line,
                    f"{kind} with {said}: these tools read {', '.join(supported)}",
                )
                return
        elif kind in CLUSTER_KINDS:
            served = CLUSTER_KINDS[kind]
            if version not in served:
                said = "no apiVersion" if version is None else f"apiVersion {version}"
                self.problem(line, f"{kind} with {said}: Kubernetes serves {', '.join(served)}")
                return
        elif kind not in POD_KINDS:
            close = _misspelt(kind)
            if close:
                self.problem(
                    line, f"kind {kind} is not one these tools read; did you mean {close}?"
                )
            self.others.add(kind)
            return  # another Kubernetes object: not for these tools
        self.documents.append(Document(self.file, line, body, _lines(node) if node else {}))


def _lines(node: yaml.Node) -> dict[Path, int]:
    """The 1-based line of every field (its key) and list item under `node`."""
    found: dict[Path, int] = {}
    pending: list[tuple[Path, yaml.Node]] = [((), node)]
    seen: set[int] = set()  # an alias is the same node: walked once
    while pending:
        path, current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, yaml.MappingNode):
            for key, value in current.value:
                if isinstance(key, yaml.ScalarNode):
                    found.setdefault((*path, key.value), key.start_mark.line + 1)
                    pending.append(((*path, key.value), value))
        elif isinstance(current, yaml.SequenceNode):
            for i, item in enumerate(current.value):
                found[(*path, i)] = item.start_mark.line + 1
                pending.append(((*path, i), item))
    return found


def _misspelt(kind: str) -> str | None:
    if kind in OTHER_KINDS:
        return None
    by_lower = {k.lower(): k for k in READ_KINDS}
    close = difflib.get_close_matches(kind.lower(), list(by_lower), n=1, cutoff=KIND_CUTOFF)
    return by_lower[close[0]] if close else None


def _null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _value_node(node: yaml.Node, key: str) -> yaml.Node | None:
    """The sequence `key` maps to in the mapping `node`, as constructed: the last of its
    keys, since a merge key's pairs come before the mapping's own, which win."""
    found = None
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            found = value_node if isinstance(value_node, yaml.SequenceNode) else None
    return found


def _yaml_problem(err: yaml.YAMLError) -> tuple[int | None, str]:
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        reason = ", ".join(part for part in (err.context, err.problem) if part)
        return mark.line + 1, f"invalid YAML at column {mark.column + 1}: {reason}"
    return None, f"invalid YAML: {err}"
