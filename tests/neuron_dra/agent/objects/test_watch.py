"""The watch event decoder: the type, and the object left for its kind's decoder."""

from __future__ import annotations

import pytest

from neuron_dra.agent.objects.fields import ObjectError
from neuron_dra.agent.objects.watch import WatchEvent, decode


def test_an_event_decodes_to_its_type_and_object() -> None:
    node = {"metadata": {"name": "n1"}}
    event = decode({"type": "MODIFIED", "object": node, "newField": 1})
    assert event == WatchEvent("MODIFIED", node) and event.object is node
    assert decode({"type": "DELETED"}) == WatchEvent("DELETED", None)
    assert decode({}) == WatchEvent("", None)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"type": 1}, "type is int, not a string"),
        ({"type": "ADDED", "object": []}, "object is list, not an object"),
        ("ADDED", "the watch event is str, not an object"),
    ],
)
def test_a_field_of_the_wrong_type_is_named_by_its_path(obj: object, message: str) -> None:
    with pytest.raises(ObjectError) as caught:
        decode(obj)
    assert str(caught.value) == message
