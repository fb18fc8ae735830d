"""Counted nouns for the tools' messages: `1 device`, `2 devices`, `1 error`."""

from __future__ import annotations


def counted(number: int | str, noun: str, plural: str | None = None) -> str:
    """`number` and the noun, singular for exactly one (`number` may be a manifest's text)."""
    return f"{number} {noun if str(number) == '1' else plural or noun + 's'}"
