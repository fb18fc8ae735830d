"""Parsers of the values in a Neuron node's sysfs files: pure functions, each raising
ValueError with the reason a value is refused, which discovery turns into a Finding
naming the file."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from consts import ENV_NEURON_LOGICAL_NC_CONFIG
from neuron_dra.hardware.inventory import RUNTIME_MODE_NODES
from neuron_dra.hardware.sysfsfile import ascii_int

MAX_VALUE_LENGTH = 64  # a ResourceSlice string attribute's limit
INSTANCE_TYPE_RE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9]+")
PRINTABLE_RE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?")
# A label value, because UltraServer ids become node labels.
LABEL_VALUE_RE = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def quote(text: str) -> str:
    shown = text if len(text) <= 40 else text[:37] + "..."
    return repr(shown)


def join(values: Iterable[int]) -> str:
    return ",".join(str(v) for v in values)


def printable(text: str) -> str:
    if not text:
        raise ValueError("empty")
    if len(text) > MAX_VALUE_LENGTH or PRINTABLE_RE.fullmatch(text) is None:
        raise ValueError(f"not printable ASCII of at most {MAX_VALUE_LENGTH} characters")
    return text


def instance_type(text: str) -> str:
    if len(text) > MAX_VALUE_LENGTH or INSTANCE_TYPE_RE.fullmatch(text) is None:
        raise ValueError("not an instance type such as trn2.48xlarge")
    return text


def serial(text: str) -> str:
    if not text:
        raise ValueError("the Neuron driver could not read it from the device's firmware")
    return printable(text)


def label_value(text: str) -> str:
    if LABEL_VALUE_RE.fullmatch(text) is None:
        raise ValueError("not usable as a label value (alphanumerics, '-', '_', '.'; 63 max)")
    return text


def int_in(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = ascii_int(text, signed=low < 0)
        except ValueError:
            raise ValueError(f"not an integer from {low} to {high}") from None
        if not low <= value <= high:
            raise ValueError(f"out of range {low}..{high}")
        return value

    return parse


def device_list(text: str) -> tuple[int, ...]:
    if not text:
        return ()
    parse = int_in(0, 9999)
    return tuple(parse(part.strip()) for part in text.split(","))


def major_minor(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(":")
    try:
        return ascii_int(major), ascii_int(minor)
    except ValueError:
        raise ValueError("expected MAJOR:MINOR such as 238:0") from None


def runtime_modes(text: str) -> tuple[int, ...]:
    parts = re.split(r"[,\s_]+", text)
    modes = tuple(sorted({ascii_int(p) for p in parts if p.isascii() and p.isdigit()}))
    if (
        not modes
        or not set(modes) <= set(RUNTIME_MODE_NODES)
        or not re.fullmatch(r"[0-9, \t\n_]+", text)
    ):
        raise ValueError(
            "expected the runtime's UltraServer modes from 1 (X4), 2 (X2H), 3 (X2V), 4 (X1) "
            "such as '1,3,4'"
        )
    return modes


def lnc_config(text: str) -> int:
    lines = [
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    ]
    if len(lines) != 1:
        raise ValueError(f"expected one line {ENV_NEURON_LOGICAL_NC_CONFIG}=1 or =2")
    key, _, value = lines[0].rpartition("=")
    if key not in ("", ENV_NEURON_LOGICAL_NC_CONFIG) or value not in ("1", "2"):
        raise ValueError(f"expected {ENV_NEURON_LOGICAL_NC_CONFIG}=1 or =2")
    return int(value)
