"""Reading sysfs files one at a time, each oddity kept as a Finding instead of raised.

Real sysfs is partial and odd: files go missing, are readable only by root, read
`busy` while an UltraServer election runs, or hold garbage. A `SysfsReader` turns
each of those into a Finding naming the path and what was done about it, and gives
back None, so the readers built on it (`discovery`) keep only what is known.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from neuron_dra.hardware import sysfsvalues as values
from neuron_dra.hardware.sysfsfile import read_text

T = TypeVar("T")


@dataclass(frozen=True)
class Finding:
    """Something sysfs said that the driver could not take at face value."""

    path: str  # absolute path as seen on the host, e.g. /sys/module/neuron/version
    message: str


class SysfsReader:
    """Files under `root`, read and parsed with a finding for every oddity."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.findings: list[Finding] = []

    def note(self, rel: str, message: str) -> None:
        self.findings.append(Finding("/" + rel, message))

    def read(self, rel: str, *, optional: bool = False) -> str | None:
        """Stripped file text, or None (with a finding unless optional and absent)."""
        try:
            text = read_text(self.root / rel)
        except FileNotFoundError:
            if not optional:
                self.note(rel, "missing")
            return None
        except PermissionError:
            self.note(rel, "unreadable: permission denied (the driver needs root to read it)")
            return None
        except UnicodeDecodeError:
            self.note(rel, "unreadable: not text")
            return None
        except OSError as err:
            self.note(rel, f"unreadable: {err.strerror or err}")
            return None
        value = text.strip()
        if value.lower() == "busy":
            self.note(rel, "busy (the Neuron driver is reconfiguring); ignored until it settles")
            return None
        return value

    def parse(self, rel: str, parser: Callable[[str], T], *, optional: bool = False) -> T | None:
        text = self.read(rel, optional=optional)
        if text is None:
            return None
        try:
            return parser(text)
        except ValueError as err:
            self.note(rel, f"invalid value {values.quote(text)}: {err}")
            return None
