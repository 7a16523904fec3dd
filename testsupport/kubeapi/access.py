"""Authentication and authorization: the server's own bearer token, and the two review APIs it answers.

Every request but a faulted one must carry ``Authorization: Bearer <token>`` (401 otherwise) when the server
has a token. TokenReview authenticates the tokens a test registered (`FakeKubeAPI.add_user`, with
``system:authenticated`` added as the real server adds it); SubjectAccessReview answers from the test's
grants (`FakeKubeAPI.grant`). Reviews are create-only and nothing is stored, as on the real server.

Deliberate simplifications (documented so nobody relies on them):

* the server's own token is all-powerful: there is no RBAC on resource requests, only 401 for a wrong token;
* SubjectAccessReview covers non-resource URLs only (``nonResourceAttributes``), with grants on an exact
  path or a ``*``-suffixed prefix, no roles or bindings; a resource review is refused with 422.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from testsupport.kubeapi.failures import ApiFailure
from testsupport.kubeapi.resource_types import JSON

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

#: the check `FakeKubeAPI.allows` makes: (user, groups, verb, path) -> allowed
Allows = Callable[[str, Sequence[str], str, str], bool]


def bearer_ok(token: str | None, authorization: str | None) -> bool:
    """Whether a request's Authorization header passes (any header does when the server has no token)."""
    return not token or authorization == f"Bearer {token}"


def user_info(username: str, groups: Sequence[str], uid: str) -> JSON:
    """The UserInfo a TokenReview returns for a registered user."""
    return {"username": username, "uid": uid or f"uid-{username}", "groups": [*groups, "system:authenticated"]}


def granted(grants: Iterable[tuple[str, str, str]], user: str, groups: Sequence[str], verb: str, path: str) -> bool:
    """Whether a grant (user or ``group:NAME``, verb or ``*``, URL or ``prefix*``) covers the request."""
    subjects = {user, *(f"group:{g}" for g in groups)}
    return any(
        subject in subjects and v in (verb, "*") and (url == path or (url.endswith("*") and path.startswith(url[:-1])))
        for subject, v, url in grants
    )


def review(path: str, body: Any, user_for: Callable[[str], JSON | None], allows: Allows) -> JSON:
    """The answer (201) to a TokenReview or SubjectAccessReview posted to ``path``.

    ``user_for`` looks a token up (a copy of its UserInfo, or None); ``allows`` checks the grants.
    """
    spec = body.get("spec") if isinstance(body, dict) else None
    if not isinstance(spec, dict):
        raise ApiFailure(422, message="spec: Required value")
    status: JSON
    if path == TOKEN_REVIEWS:
        token = spec.get("token")
        if not isinstance(token, str) or not token:
            raise ApiFailure(422, message="spec.token: Required value")
        user = user_for(token)
        status = {"authenticated": True, "user": user} if user else {"authenticated": False, "error": "invalid token"}
        kind, api_version = "TokenReview", "authentication.k8s.io/v1"
    else:
        attrs = spec.get("nonResourceAttributes")
        if not isinstance(attrs, dict) or spec.get("resourceAttributes") is not None:
            raise ApiFailure(422, message="exactly one of nonResourceAttributes, resourceAttributes is required")
        if not spec.get("user") and not spec.get("groups"):
            raise ApiFailure(422, message="at least one of user or group must be specified")
        allowed = allows(
            str(spec.get("user") or ""),
            list(spec.get("groups") or []),
            str(attrs.get("verb")),
            str(attrs.get("path")),
        )
        status = {"allowed": allowed, "reason": "allowed by a fake RBAC rule" if allowed else ""}
        kind, api_version = "SubjectAccessReview", "authorization.k8s.io/v1"
    return {"kind": kind, "apiVersion": api_version, "metadata": {}, "spec": spec, "status": status}
