"""Which existing nodes join which pool (provider existing), and what each pool's node patch owns.

Pure: nodes come in as the API server's JSON (a live list, or `kubectl get nodes -o json
--show-managed-fields`). A pool's `nodeSelector` picks its nodes (every label must match, like a
pod's nodeSelector). Tessera gives them the pool's labels and taints with one server-side-apply
patch per node and pool, under the field manager `tessera-pool-<pool>`; `metadata.managedFields`
then says which labels and taints each pool's manager owns, so the next preview knows what to
release when a pool is removed or a node leaves it.

Why taints need a check before they are applied: `node.spec.taints` is an atomic list in
server-side apply (`x-kubernetes-list-type: atomic` in the 1.30 OpenAPI schema), so whoever applies
it owns, and replaces, the whole list. A taint on a pool node that neither the pool declares nor a
Tessera pool manager owns would be dropped by the first apply; it is reported instead. Taints the
control plane keeps itself (node.kubernetes.io/*, the cloud provider's and the cluster autoscaler's)
are left to it: their controllers put them back whenever they apply.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tessera.model.labels_taints import AnyPool, TaintSpec, pool_taints
from tessera.model.problems import Problem, at

FIELD_MANAGER_PREFIX: Final = "tessera-pool-"
# taints their controllers own and re-apply: never ours to keep or drop
CONTROLLER_TAINT_PREFIXES: Final = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")
CONTROLLER_TAINT_KEYS: Final = frozenset({"ToBeDeletedByClusterAutoscaler", "DeletionCandidateOfClusterAutoscaler"})


def field_manager(pool: str) -> str:
    """The server-side-apply field manager of a pool's node patches (pool names are <= 25 characters)."""
    return FIELD_MANAGER_PREFIX + pool


def _is_controller_taint(key: str) -> bool:
    return key.startswith(CONTROLLER_TAINT_PREFIXES) or key in CONTROLLER_TAINT_KEYS


@dataclass(frozen=True)
class ManagerFields:
    """What one field manager owns on a node: label keys, and whether it owns `spec.taints`."""

    labels: frozenset[str] = frozenset()
    taints: bool = False


@dataclass(frozen=True)
class NodeFacts:
    """The parts of a Node object membership needs."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[TaintSpec, ...]
    managers: Mapping[str, ManagerFields]
    """Field manager -> what it owns (empty when the source carried no managedFields)."""
    has_managed_fields: bool

    def tessera_managers(self) -> dict[str, ManagerFields]:
        """Pool name -> what its manager owns here (labels or taints; annotations are not counted)."""
        return {m.removeprefix(FIELD_MANAGER_PREFIX): f for m, f in self.managers.items() if m.startswith(FIELD_MANAGER_PREFIX) and (f.labels or f.taints)}


def _owned(fields_v1: Any) -> ManagerFields:
    if not isinstance(fields_v1, Mapping):
        return ManagerFields()
    meta = fields_v1.get("f:metadata") or {}
    labels = meta.get("f:labels") if isinstance(meta, Mapping) else None
    spec = fields_v1.get("f:spec") or {}
    keys = frozenset(str(k).removeprefix("f:") for k in labels) if isinstance(labels, Mapping) else frozenset()
    return ManagerFields(keys, isinstance(spec, Mapping) and "f:taints" in spec)


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    taints = tuple(
        TaintSpec(str(t.get("key", "")), str(t.get("value", "") or ""), t.get("effect", "NoSchedule"))
        for t in spec.get("taints") or []
        if isinstance(t, Mapping)
    )
    managers: dict[str, ManagerFields] = {}
    entries = meta.get("managedFields")
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, Mapping) and entry.get("manager"):
            owned = _owned(entry.get("fieldsV1"))
            previous = managers.get(str(entry["manager"]), ManagerFields())
            managers[str(entry["manager"])] = ManagerFields(previous.labels | owned.labels, previous.taints or owned.taints)
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    return NodeFacts(str(meta.get("name", "")), labels, taints, managers, isinstance(entries, list))


@dataclass(frozen=True)
class PoolNodes:
    """One pool of an existing cluster and the nodes its selector picks, by name."""

    pool: str
    index: int
    selector: Mapping[str, str]
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Release:
    """A node that carries what a pool's manager applied, but is no longer that pool's: apply an empty
    patch with the same manager, which drops every field only it owns."""

    pool: str
    node: str
    labels: tuple[str, ...]
    taints: bool


@dataclass(frozen=True)
class Membership:
    pools: tuple[PoolNodes, ...]
    releases: tuple[Release, ...] = ()
    problems: tuple[Problem, ...] = ()
    notes: tuple[str, ...] = ()
    nodes: Mapping[str, NodeFacts] = field(default_factory=dict)

    def nodes_of(self, pool: str) -> tuple[str, ...]:
        return next((p.nodes for p in self.pools if p.pool == pool), ())

    def to_json(self) -> dict[str, list[str]]:
        """Pool -> its nodes (the `poolNodes` stack output and `tessera plan --json`)."""
        return {p.pool: list(p.nodes) for p in self.pools}

    def lines(self) -> list[str]:
        """What preview and `tessera plan` print (the notes are warnings, printed apart)."""
        out = []
        for p in self.pools:
            selector = ",".join(f"{k}={v}" for k, v in sorted(p.selector.items()))
            joined = ", ".join(p.nodes) if p.nodes else "no node yet"
            out.append(f"pool {p.pool} ({selector}): {joined}")
        for r in self.releases:
            what = ", ".join([*r.labels, *(["taints"] if r.taints else [])])
            out.append(f"node {r.node} leaves pool {r.pool}: Tessera removes {what}")
        return out


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def pool_membership(pools: Iterable[AnyPool], nodes: Iterable[Mapping[str, Any]]) -> Membership:
    """Membership of the stack's pools (StackConfig.node_pools of an existing cluster) over ``nodes``."""
    facts = {f.name: f for f in (node_facts(n) for n in nodes) if f.name}
    pool_list = list(pools)
    problems: list[Problem] = []
    notes: list[str] = []
    owner: dict[str, int] = {}
    members: list[PoolNodes] = []
    for i, pool in enumerate(pool_list):
        picked = tuple(sorted(name for name, f in facts.items() if _selects(pool.node_selector, f.labels)))
        for name in picked:
            if name in owner:
                first = pool_list[owner[name]]
                problems.append(Problem(at("nodePools", i, "nodeSelector"), f"also selects node {name!r}, which nodePools[{owner[name]}] ({first.name}) selects; a node belongs to one pool"))
            else:
                owner[name] = i
            found = _taint_problems(pool, i, facts[name])
            if facts[name].has_managed_fields:
                problems += found
            else:  # a dump without managedFields cannot say which taints a Tessera pool applied
                notes += [f"{p.message} (unsure: the node list has no managedFields; dump it with `kubectl get nodes -o json --show-managed-fields`)" for p in found]
        if len(picked) < pool.min_size:
            notes.append(f"pool {pool.name}: its selector matches {len(picked)} node(s), fewer than minSize {pool.min_size}")
        members.append(PoolNodes(pool.name, i, dict(pool.node_selector), picked))
    releases = _releases(members, facts)
    return Membership(tuple(members), releases, tuple(problems), tuple(notes), facts)


def _taint_problems(pool: AnyPool, index: int, node: NodeFacts) -> list[Problem]:
    if any(f.taints for f in node.tessera_managers().values()):
        return []  # the list is already a Tessera pool manager's: its taints are ours
    declared = {(t.key, t.effect) for t in pool_taints(pool)}
    out = []
    for taint in node.taints:
        if _is_controller_taint(taint.key) or (taint.key, taint.effect) in declared:
            continue
        text = f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}:{taint.effect}"
        out.append(Problem(
            at("nodePools", index, "taints"),
            f"node {node.name!r} carries taint {text}, which this pool does not declare; Tessera applies the pool's taints as the "
            "node's whole taint list (node.spec.taints is an atomic list in server-side apply), which would drop it: add it to "
            f"nodePools[{index}].taints or remove it from the node",
        ))
    return out


def _releases(members: list[PoolNodes], facts: Mapping[str, NodeFacts]) -> tuple[Release, ...]:
    current = {(p.pool, n) for p in members for n in p.nodes}
    out = []
    for name, node in sorted(facts.items()):
        for pool, owned in sorted(node.tessera_managers().items()):
            if (pool, name) not in current:
                out.append(Release(pool, name, tuple(sorted(owned.labels)), owned.taints))
    return tuple(out)
