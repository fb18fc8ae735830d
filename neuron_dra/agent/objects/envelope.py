"""The envelopes the API client reads on its way to an object: a list's page, an error
Status (in an answer or a watch's ERROR event) and the server's version.

A page is the API server's and is decoded as strictly as the objects in it; its items
stay as sent, for their kind's decoder. An error body is read leniently: a proxy or
load balancer in front of the API server may answer an error with anything, and the
error it stands for must still reach the caller, so a field of the wrong type there
counts as absent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from neuron_dra.agent.objects import fields as f


@dataclass(frozen=True, slots=True)
class Page:
    items: list[Any]  # each as sent, for its kind's decoder
    resource_version: str  # "" when the server gave none


def page(obj: Any) -> Page:
    """A list's answer; ObjectError naming the field of a wrong type."""
    answer = f.as_object(obj, "the list")
    metadata = f.obj(answer, "metadata", "")
    return Page(f.items(answer, "items", ""), f.text(metadata, "resourceVersion", "metadata"))


@dataclass(frozen=True, slots=True)
class Status:
    code: int  # 0 when the body names none
    message: str | None
    retry_after_s: float | None  # details.retryAfterSeconds, where a number of seconds


def status(obj: Any) -> Status:
    """What an error body says; whatever it is, never an error of its own."""
    body = obj if isinstance(obj, dict) else {}
    code, message, details = body.get("code"), body.get("message"), body.get("details")
    retry = details.get("retryAfterSeconds") if isinstance(details, dict) else None
    return Status(
        code=code if isinstance(code, int) and not isinstance(code, bool) else 0,
        message=message if isinstance(message, str) else None,
        retry_after_s=seconds(retry),
    )


def seconds(value: Any) -> float | None:
    """`value` as a number of seconds to wait, where it is one (a header's text too)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        found = float(value)
    except ValueError:
        return None
    return found if found >= 0 and math.isfinite(found) else None


def git_version(obj: Any) -> str:
    """The server's gitVersion (GET /version), e.g. v1.37.2; "" where it names none."""
    return f.text(f.as_object(obj, "the version"), "gitVersion", "")
