"""`neuron-dra convert` on YAML text: the beta ResourceClaims, ResourceClaimTemplates and
DeviceClasses of a file rewritten as resource.k8s.io/v1 (`convert`), the rest as written.

The text is cut at its document markers (`---` or `...` at the start of a line, which
YAML forbids inside any scalar), and a document is written anew only if it holds an
object to convert: a Pod, a Deployment, an object already in v1 or a comment between
documents comes out byte for byte. A document that changes goes through ruamel.yaml's
round trip, which keeps its comments, key order, quotes and flow lists
(docs/contributors/decisions.md says why that library); its indentation is the one
the document used, as far as one width for mappings and one offset for list dashes
describe it. A plain scalar folded over several lines comes out on one: the same
string, which the round trip does not keep folded.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from neuron_dra.tools import convert, manifests

MARKER = re.compile(r"^(---|\.\.\.)(?=\s|$)")
WIDTH = 1 << 16  # no line is folded for being long: expressions stay whole


@dataclass(frozen=True)
class Finding:
    """A message of `convert` about one file, as `lint` words its findings."""

    file: str
    line: int | None
    error: bool
    where: str
    message: str

    def __str__(self) -> str:
        at = self.file if self.line is None else f"{self.file}:{self.line}"
        level = "error" if self.error else "warning"
        return ": ".join(p for p in (at, level, self.where, self.message) if p)


@dataclass(frozen=True)
class Result:
    """A file converted: its new text, whether anything in it changed, and the findings."""

    text: str
    changed: bool
    findings: tuple[Finding, ...]

    @property
    def failed(self) -> bool:
        return any(f.error for f in self.findings)


def convert_text(text: str, file: str) -> Result:
    """The text of `file` with its beta claims, templates and classes as v1."""
    out: list[str] = []
    findings: list[Finding] = []
    changed = False
    for first_line, marker, content in _documents(text):
        new, found = _convert_chunk(content, file, first_line)
        findings += found
        changed |= new is not None
        if new is not None and MARKER.match(content):
            new = "---\n" + new  # the round trip writes no marker of its own
        out.append(marker + (content if new is None else new))
    return Result("".join(out), changed, tuple(findings))


def convert_file(path: Path) -> Result:
    """`convert_text` of the file at `path` (`-`: standard input), or why it cannot be read."""
    text, unread = read(path)
    if text is None:
        return Result("", False, (unread,) if unread else ())
    return convert_text(text, manifests.file_name(path))


def read(path: Path) -> tuple[str | None, Finding | None]:
    """The text of `path` (`-`: standard input), or why it cannot be read: the limits
    `lint` reads files with."""
    file = manifests.file_name(path)
    try:
        if str(path) == manifests.STDIN:
            data = sys.stdin.buffer.read(manifests.MAX_FILE_BYTES + 1)
        else:
            with path.open("rb") as stream:
                data = stream.read(manifests.MAX_FILE_BYTES + 1)
    except OSError as err:
        return None, Finding(file, None, True, "", err.strerror or str(err))
    if len(data) > manifests.MAX_FILE_BYTES:
        limit = manifests.MAX_FILE_BYTES // 2**20
        return None, Finding(file, None, True, "", f"larger than {limit} MiB; split it")
    try:
        return data.decode(), None
    except UnicodeDecodeError as err:
        message = f"not UTF-8 text: {err.reason} at byte {err.start}"
        return None, Finding(file, None, True, "", message)


def joined(texts: Sequence[str]) -> str:
    """Several files' texts as one stream of documents, for standard output: a `---`
    between two files unless the second starts with a marker of its own."""
    out = ""
    for text in texts:
        if out and not out.endswith("\n"):
            out += "\n"
        if out and not MARKER.match(text):
            out += "---\n"
        out += text
    return out


def _documents(text: str) -> Iterator[tuple[int, str, str]]:
    """(1-based line of the content, marker line or '', content) for each piece of `text`
    between document markers. A marker with content after it (`--- {...}`) stays the
    first line of its content."""
    lines = text.splitlines(keepends=True)
    start, marker = 0, ""
    for i, line in enumerate(lines):
        if not MARKER.match(line):
            continue
        if i > start or marker:
            yield start + 1, marker, "".join(lines[start:i])
        rest = line[3:].strip()
        if rest and not rest.startswith("#"):
            start, marker = i, ""
        else:
            start, marker = i + 1, line
    yield start + 1, marker, "".join(lines[start:])


def _yaml(content: str) -> YAML:
    yaml = YAML()  # round trip
    yaml.preserve_quotes = True
    yaml.width = WIDTH
    mapping, offset = _indentation(content)
    yaml.indent(mapping=mapping, sequence=mapping + offset, offset=offset)
    return yaml


def _indentation(content: str) -> tuple[int, int]:
    """The mapping indent and list-dash offset `content` uses (2 and 0, as kubectl
    writes, where it shows none)."""
    mapping = offset = None
    previous: tuple[int, bool] | None = None  # indent of the last line, and if it ended ':'
    for line in content.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        if previous is not None and previous[1]:
            if stripped.startswith("- ") or stripped == "-":
                offset = indent - previous[0] if offset is None else offset
            elif indent > previous[0] and mapping is None:
                mapping = indent - previous[0]
        if mapping is not None and offset is not None:
            break
        previous = (indent, stripped.endswith(":") and not stripped.startswith("- "))
    return mapping or 2, max(offset or 0, 0)


def _convert_chunk(content: str, file: str, first_line: int) -> tuple[str | None, list[Finding]]:
    """The chunk written anew if it changed (else None), and its findings."""
    yaml = _yaml(content)
    try:
        documents = list(yaml.load_all(content))
    except YAMLError as err:
        return None, [_yaml_finding(err, file, first_line)]
    findings: list[Finding] = []
    changed = False
    for document in documents:
        line = first_line + _line(document)
        for obj in _objects(document):
            if isinstance(obj, str):
                findings.append(Finding(file, line, True, "", obj))
                continue
            where = f"{obj.get('kind')} {_name(obj)}"
            obj_line = first_line + _line(obj)
            was_beta = convert.beta(obj)
            messages = _convert_object(obj)
            changed |= was_beta and not any(m.error for m in messages)
            findings += [
                Finding(file, obj_line, m.error, _join(where, m.where), m.message) for m in messages
            ]
    if not changed or any(f.error for f in findings):
        return None, findings
    stream = io.StringIO()
    yaml.dump_all(documents, stream)
    return stream.getvalue(), findings


def _convert_object(obj: MutableMapping[str, Any]) -> list[convert.Message]:
    version = str(obj.get("apiVersion"))
    group = version.rpartition("/")[0]
    kind = obj.get("kind")
    if group != convert.GROUP or version == convert.V1:
        return []
    if kind not in convert.KINDS:
        if version in convert.REMOVED_IN:
            message = (
                f"kind {kind} is not one convert rewrites ({', '.join(convert.KINDS)}); "
                f"{version} is removed in Kubernetes {convert.REMOVED_IN[version]}"
            )
            return [convert.Message(True, "", message)]
        return []
    if version not in convert.REMOVED_IN:
        readable = ", ".join(convert.REMOVED_IN)
        return [convert.Message(True, "", f"apiVersion {version}: convert reads {readable}")]
    return convert.to_v1(obj)


def _objects(document: object) -> Iterator[MutableMapping[str, Any] | str]:
    """The Kubernetes objects of a document (a List's items), or why it is none."""
    if document is None:
        return  # `---` with nothing after it
    if not isinstance(document, MutableMapping):
        yield "not a Kubernetes object (a mapping with a kind)"
        return
    kind = document.get("kind")
    if kind == "List" and isinstance(document.get("items"), list):
        for item in document["items"]:
            yield from _objects(item)
        return
    if not isinstance(kind, str) or not kind:
        yield "no kind: not a Kubernetes object"
        return
    yield document


def _line(node: object) -> int:
    """The 0-based line of a round-tripped mapping within its chunk."""
    lc = getattr(node, "lc", None)
    return int(lc.line) if lc is not None and lc.line is not None else 0


def _name(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return str(name) if name else "?"


def _join(where: str, part: str) -> str:
    return f"{where}: {part}" if part else where


def _yaml_finding(err: YAMLError, file: str, first_line: int) -> Finding:
    if isinstance(err, MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        reason = ", ".join(str(p) for p in (err.context, err.problem) if p)
        return Finding(
            file,
            first_line + mark.line,
            True,
            "",
            f"invalid YAML at column {mark.column + 1}: {reason}",
        )
    return Finding(file, None, True, "", f"invalid YAML: {err}")
