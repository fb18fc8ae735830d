"""The TokenReview and SubjectAccessReview decoders: verdicts and user, typed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from neuron_dra.agent.objects.fields import ObjectError
from neuron_dra.agent.objects.review import (
    TokenReview,
    UserInfo,
    decode_access_allowed,
    decode_token_review,
)


def token_review() -> dict[str, Any]:
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "t"},
        "status": {
            "authenticated": True,
            "audiences": ["https://kubernetes.default.svc"],
            "user": {
                "username": "system:serviceaccount:monitoring:prometheus",
                "uid": "u1",
                "groups": ["system:serviceaccounts"],
                "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]},
            },
        },
    }


def test_a_token_review_decodes_to_the_verdict_and_the_user() -> None:
    assert decode_token_review(token_review()) == TokenReview(
        authenticated=True,
        user=UserInfo(
            "system:serviceaccount:monitoring:prometheus",
            "u1",
            ("system:serviceaccounts",),
            {"authentication.kubernetes.io/pod-name": ("prometheus-0",)},
        ),
    )


def test_an_answer_without_a_status_authenticates_no_one_and_allows_nothing() -> None:
    assert decode_token_review({}) == TokenReview(False, UserInfo("", "", (), {}))
    assert decode_access_allowed({}) is False
    assert decode_access_allowed({"status": {"allowed": True, "reason": "RBAC"}}) is True


def test_fields_the_model_does_not_name_are_ignored() -> None:
    obj = token_review()
    obj["status"]["newField"] = {"x": 1}
    obj["status"]["user"]["newField"] = [1]
    assert decode_token_review(obj) == decode_token_review(token_review())


@pytest.mark.parametrize(
    ("break_", "message"),
    [
        (lambda r: r.update(status=[]), "status is list, not an object"),
        (
            lambda r: r["status"].update(authenticated="true"),
            "status.authenticated is str, not a boolean",
        ),
        (lambda r: r["status"].update(user="me"), "status.user is str, not an object"),
        (
            lambda r: r["status"]["user"].update(username=1),
            "status.user.username is int, not a string",
        ),
        (lambda r: r["status"]["user"].update(uid=[]), "status.user.uid is list, not a string"),
        (
            lambda r: r["status"]["user"].update(groups=["a", 2]),
            "status.user.groups[1] is int, not a string",
        ),
        (
            lambda r: r["status"]["user"].update(extra={"k": "v"}),
            "status.user.extra.k is str, not a list",
        ),
    ],
)
def test_a_token_review_field_of_the_wrong_type_is_named_by_its_path(
    break_: Callable[[dict[str, Any]], None], message: str
) -> None:
    obj = token_review()
    break_(obj)
    with pytest.raises(ObjectError) as caught:
        decode_token_review(obj)
    assert str(caught.value) == message


def test_an_access_review_of_the_wrong_type_is_named_by_its_path() -> None:
    with pytest.raises(ObjectError, match=r"^status\.allowed is str, not a boolean$"):
        decode_access_allowed({"status": {"allowed": "yes"}})
    with pytest.raises(ObjectError, match=r"^the SubjectAccessReview is null, not an object$"):
        decode_access_allowed(None)
