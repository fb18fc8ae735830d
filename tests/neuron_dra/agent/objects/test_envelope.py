"""The envelopes on the way to an object: a list's page strictly, an error leniently."""

from __future__ import annotations

from typing import Any

import pytest

from neuron_dra.agent.objects import envelope
from neuron_dra.agent.objects.fields import ObjectError


def test_a_page_gives_its_items_as_sent_and_its_resource_version() -> None:
    item = {"metadata": {"name": "n1"}, "spec": {"unknown": True}}
    found = envelope.page(
        {"kind": "NodeList", "metadata": {"resourceVersion": "42"}, "items": [item]}
    )
    assert found == envelope.Page([item], "42")
    assert envelope.page({"metadata": {}}) == envelope.Page([], "")


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ([], "the list is list, not an object"),
        ({"items": {}}, "items is dict, not a list"),
        ({"metadata": {"resourceVersion": 42}}, "metadata.resourceVersion is int, not a string"),
    ],
)
def test_a_page_of_the_wrong_shape_is_named(answer: Any, message: str) -> None:
    with pytest.raises(ObjectError, match=message):
        envelope.page(answer)


def test_an_error_status_is_read_whatever_it_holds() -> None:
    said = envelope.status(
        {"kind": "Status", "code": 429, "message": "slow down", "details": {"retryAfterSeconds": 3}}
    )
    assert said == envelope.Status(429, "slow down", 3.0)
    # A proxy's answer, or fields of the wrong type: the error still stands, unnamed.
    assert envelope.status("<html>bad gateway</html>") == envelope.Status(0, None, None)
    odd = {"code": "500", "message": 7, "details": {"retryAfterSeconds": -1}}
    assert envelope.status(odd) == envelope.Status(0, None, None)
    assert envelope.status({"code": True}).code == 0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("2", 2.0),
        (1.5, 1.5),
        ("soon", None),
        (None, None),
        ("-1", None),
        ("inf", None),
        (True, None),
    ],
)
def test_seconds_to_wait(value: Any, seconds: float | None) -> None:
    assert envelope.seconds(value) == seconds


def test_the_server_version() -> None:
    assert envelope.git_version({"major": "1", "gitVersion": "v1.38.0-beta.0"}) == "v1.38.0-beta.0"
    assert envelope.git_version({}) == ""
