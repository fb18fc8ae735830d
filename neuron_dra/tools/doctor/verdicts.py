"""A check's verdict, and the report of all of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

Verdict = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    name: str
    verdict: Verdict
    detail: str  # what was seen
    fix: str = ""  # what to do, where the verdict is not ok


def ok(name: str, detail: str) -> Check:
    return Check(name, "ok", detail)


def warn(name: str, detail: str, fix: str) -> Check:
    return Check(name, "warn", detail, fix)


def fail(name: str, detail: str, fix: str) -> Check:
    return Check(name, "fail", detail, fix)


def exit_status(checks: Sequence[Check]) -> int:
    """1 if any check failed, else 0: warnings are for a person to read."""
    return 1 if any(c.verdict == "fail" for c in checks) else 0


def text(checks: Sequence[Check]) -> str:
    width = max((len(c.name) for c in checks), default=0)
    lines = []
    for check in checks:
        lines.append(f"{check.verdict.upper():<5} {check.name:<{width}}  {check.detail}")
        if check.fix:
            lines.append(f"{'':<5} {'':<{width}}  fix: {check.fix}")
    counts = {v: sum(c.verdict == v for c in checks) for v in ("ok", "warn", "fail")}
    lines.append(f"{counts['ok']} ok, {counts['warn']} warnings, {counts['fail']} failed")
    return "\n".join(lines)


def as_json(checks: Sequence[Check]) -> dict[str, Any]:
    return {
        "checks": [asdict(c) for c in checks],
        "failed": sum(c.verdict == "fail" for c in checks),
        "warnings": sum(c.verdict == "warn" for c in checks),
    }
