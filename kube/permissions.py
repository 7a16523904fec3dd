"""The RBAC permissions behind every Kubernetes API call Colo makes.

All API traffic goes through ``kube/``: the public methods of `Kube`, `Informer` (list + watch of one kind)
and `LeaderElector` (get, create and update of one Lease). This table says what each of them needs, so that
the ClusterRoles under ``deploy/daemonset`` can be checked against the calls the code really makes
(``tests/test_deploy.py`` scans ``agent/`` and ``controller/`` for them). A new `Kube` method must be added
here, or that test fails.

Scopes:

* ``cluster``: the call may address any namespace (or a cluster-scoped kind): only a ClusterRole grants it.
* ``configured-namespace``: every call addresses the one namespace the caller was configured with (Colo's
  own, e.g. the leader-election Lease): a Role in that namespace is enough.
* ``call``: the kind-taking calls (``list``, ``watch``, ``Informer``): ``configured-namespace`` when the call
  site passes ``namespace=``, else ``cluster``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, cast, get_args

from kube.kinds import RESOURCES, Kind

Scope = Literal["cluster", "configured-namespace", "call"]
KINDS: Final[tuple[str, ...]] = get_args(Kind)


@dataclass(frozen=True, order=True)
class Permission:
    """One RBAC grant: API group ("" for core), resource (``plural`` or ``plural/subresource``) and verb."""

    group: str
    resource: str
    verb: str

    def __str__(self) -> str:
        where = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{where} {self.verb}"


@dataclass(frozen=True)
class CallRule:
    """What one call needs: fixed ``permissions``, and/or ``kind_verbs`` on the kind named by its argument."""

    permissions: tuple[Permission, ...] = ()
    kind_verbs: tuple[str, ...] = ()
    scope: Scope = "cluster"


def group_of(kind: str) -> str:
    """The API group of one of `kube.kinds.RESOURCES`' kinds ("" for the core group)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}: kube.kinds.RESOURCES knows {', '.join(KINDS)}")
    api_version = RESOURCES[cast(Kind, kind)].api_version
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def on_kind(kind: str, *verbs: str, sub: str | None = None) -> tuple[Permission, ...]:
    """Permissions for ``verbs`` on a kind (or on its subresource ``sub``)."""
    group = group_of(kind)
    resource = f"{kind}/{sub}" if sub else kind
    return tuple(Permission(group, resource, verb) for verb in verbs)


#: Every public `Kube` method (the classmethod ``connect`` included) and the kube/ classes that call the API.
CALLS: Final[Mapping[str, CallRule]] = {
    # -- Kube: no request
    "connect": CallRule(),  # builds the client from a kubeconfig or the service account
    "close": CallRule(),
    # -- Kube: kind-taking
    "list": CallRule(kind_verbs=("list",), scope="call"),
    "watch": CallRule(kind_verbs=("watch",), scope="call"),
    # -- Kube: nodes
    "get_node": CallRule(on_kind("nodes", "get")),
    "patch_node_annotations": CallRule(on_kind("nodes", "patch")),  # JSON merge patch of metadata
    "patch_node_labels": CallRule(on_kind("nodes", "patch")),
    "patch_node_extended_resources": CallRule(on_kind("nodes", "patch", sub="status")),  # status subresource
    "set_node_taint": CallRule(on_kind("nodes", "get", "patch")),  # read, then JSON patch guarded by a test op
    # -- Kube: pods
    "evict_pod": CallRule(on_kind("pods", "create", sub="eviction")),  # policy/v1 Eviction (PDBs hold)
    # -- Kube: events (core/v1, always created, never patched)
    "create_event": CallRule(on_kind("events", "create")),
    # -- Kube: leases (always in the namespace the caller was configured with)
    "get_lease": CallRule(on_kind("leases", "get"), scope="configured-namespace"),
    "create_lease": CallRule(on_kind("leases", "create"), scope="configured-namespace"),
    "replace_lease": CallRule(on_kind("leases", "update"), scope="configured-namespace"),
    # -- Kube: reviews of the bearer tokens our own HTTP clients present (secure serving)
    "review_token": CallRule((Permission("authentication.k8s.io", "tokenreviews", "create"),)),
    "review_access": CallRule((Permission("authorization.k8s.io", "subjectaccessreviews", "create"),)),
    # -- kube/ classes
    "Informer": CallRule(kind_verbs=("list", "watch"), scope="call"),  # Informer(kube, kind, namespace=...)
    "LeaderElector": CallRule(on_kind("leases", "get", "create", "update"), scope="configured-namespace"),
}

#: The classes above (constructed, not called as a `Kube` method).
CONSTRUCTORS: Final[frozenset[str]] = frozenset({"Informer", "LeaderElector"})


def permissions(call: str, kind: str | None = None) -> tuple[Permission, ...]:
    """What one call needs; ``kind`` is required exactly for the kind-taking calls.

    Raises KeyError for a call missing from `CALLS` and ValueError for a missing or unknown kind.
    """
    rule = CALLS[call]
    if rule.kind_verbs:
        if kind is None:
            raise ValueError(f"{call} needs the kind it lists/watches")
        return rule.permissions + on_kind(kind, *rule.kind_verbs)
    if kind is not None:
        raise ValueError(f"{call} takes no kind")
    return rule.permissions


@dataclass(frozen=True)
class OptionalGrant:
    """Permissions granted only when a setting turns the feature on (a kustomize component of its own)."""

    component: str  # deploy/daemonset/<component>/
    setting: str  # the configuration key that turns it on
    calls: tuple[str, ...]
    permissions: tuple[Permission, ...]


#: Not in the agent's main ClusterRole: granted by the named component, together with the setting. None since
#: the extended resources (nodes/status patch) became the default (issue 11): their grant is in the main role.
OPTIONAL_GRANTS: Final[tuple[OptionalGrant, ...]] = ()


#: Not in the controller's main ClusterRole: granted by the component that ships the admission webhook.
CONTROLLER_OPTIONAL_GRANTS: Final[tuple[OptionalGrant, ...]] = (
    OptionalGrant(
        component="colocation-profiles",
        setting="admission_file",  # the controller setting (flag --admission) that starts the webhook
        calls=("Informer",),
        permissions=on_kind("namespaces", "list", "watch") + on_kind("priorityclasses", "list", "watch"),
    ),
)


def expand_rules(rules: Iterable[Mapping[str, Any]]) -> set[Permission]:
    """The permissions a list of RBAC PolicyRules grants (wildcards are kept as the literal "*")."""
    out: set[Permission] = set()
    for rule in rules:
        for group in rule.get("apiGroups") or ():
            for resource in rule.get("resources") or ():
                for verb in rule.get("verbs") or ():
                    out.add(Permission(str(group), str(resource), str(verb)))
    return out


def to_rules(perms: Iterable[Permission]) -> list[dict[str, list[str]]]:
    """PolicyRules granting exactly ``perms``: one rule per (group, resource), verbs sorted."""
    by_target: dict[tuple[str, str], set[str]] = {}
    for p in perms:
        by_target.setdefault((p.group, p.resource), set()).add(p.verb)
    return [
        {"apiGroups": [group], "resources": [resource], "verbs": sorted(verbs)}
        for (group, resource), verbs in sorted(by_target.items())
    ]
