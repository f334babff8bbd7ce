"""The in-memory API server keeps the semantics the extender's safety relies on."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from tessera.kube.api import Conflict, KubeApi, KubeApiError, NotFound, WatchEvent
from tessera.kube.fake import FakeKubeApi
from tessera.kube.fake_status import status_of


def _pod(name: str, ns: str = "default", labels: dict[str, str] | None = None) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": ns, "labels": labels or {}}, "spec": {"containers": [{"name": "c"}]}}


def _node(name: str) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": {"pool": "a"}}, "status": {"allocatable": {"cpu": "8"}}}


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    fake = FakeKubeApi()
    yield fake
    fake.close()


def test_fake_satisfies_the_kube_api_protocol(api: FakeKubeApi) -> None:
    typed: KubeApi = api
    assert typed.list_pods() == []


def test_stale_resource_version_is_a_conflict(api: FakeKubeApi) -> None:
    created = api.create_pod(_pod("p"))
    rv = created["metadata"]["resourceVersion"]
    api.patch_pod_annotations("default", "p", {"a": "1"}, resource_version=rv)
    with pytest.raises(Conflict):
        api.patch_pod_annotations("default", "p", {"a": "2"}, resource_version=rv)
    assert api.get_pod("default", "p")["metadata"]["annotations"] == {"a": "1"}


def test_patch_none_deletes_an_annotation(api: FakeKubeApi) -> None:
    api.create_pod(_pod("p"))
    api.patch_pod_annotations("default", "p", {"a": "1", "b": "2"})
    api.patch_pod_annotations("default", "p", {"a": None})
    assert api.get_pod("default", "p")["metadata"]["annotations"] == {"b": "2"}


@pytest.mark.parametrize(
    ("uid_override", "second_node", "error"),
    [
        (None, "n1", Conflict),  # already bound
        ("not-the-uid", None, Conflict),  # UID precondition
    ],
)
def test_bind_conflicts(api: FakeKubeApi, uid_override: str | None, second_node: str | None, error: type[Exception]) -> None:
    api.create_node(_node("n1"))
    uid = api.create_pod(_pod("p"))["metadata"]["uid"]
    if second_node:
        api.bind_pod("default", "p", uid, "n1")
        with pytest.raises(error):
            api.bind_pod("default", "p", uid, second_node)
    else:
        with pytest.raises(error):
            api.bind_pod("default", "p", uid_override or uid, "n1")
    assert api.get_pod("default", "p")["spec"].get("nodeName") == (second_node and "n1")


def test_missing_objects_are_not_found(api: FakeKubeApi) -> None:
    for call in (
        lambda: api.get_pod("default", "nope"),
        lambda: api.get_node("nope"),
        lambda: api.get_configmap("default", "nope"),
        lambda: api.bind_pod("default", "nope", "", "n"),
    ):
        with pytest.raises(NotFound):
            call()


def test_configmap_create_twice_conflicts_and_owner_deletion_collects_it(api: FakeKubeApi) -> None:
    pod = api.create_pod(_pod("p"))
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": pod["metadata"]["uid"]}
    body = {"metadata": {"name": "cm", "ownerReferences": [owner]}, "data": {"k": "v"}}
    api.create_configmap("default", body)
    with pytest.raises(Conflict):
        api.create_configmap("default", body)
    api.replace_configmap("default", "cm", {"metadata": {"name": "cm", "ownerReferences": [owner]}, "data": {"k": "w"}})
    assert api.get_configmap("default", "cm")["data"] == {"k": "w"}
    api.delete_pod("default", "p")
    assert api.list_configmaps() == []


def test_label_selector_and_node_name_filters(api: FakeKubeApi) -> None:
    api.create_node(_node("n1"))
    api.create_pod(_pod("a", labels={"app": "x"}))
    uid = api.create_pod(_pod("b", labels={"app": "y"}))["metadata"]["uid"]
    api.bind_pod("default", "b", uid, "n1")
    assert [p["metadata"]["name"] for p in api.list_pods(label_selector="app=x")] == ["a"]
    assert [p["metadata"]["name"] for p in api.list_pods(label_selector="app!=x")] == ["b"]
    assert [p["metadata"]["name"] for p in api.list_pods(node_name="n1")] == ["b"]
    assert [n["metadata"]["name"] for n in api.list_nodes(label_selector="pool=a")] == ["n1"]


def test_watch_without_version_starts_with_existing_objects_then_follows(api: FakeKubeApi) -> None:
    api.create_pod(_pod("old"))
    stream = api.watch_pods(stop_after_s=2)
    first = next(stream)
    assert (first.type, first.object["metadata"]["name"]) == ("ADDED", "old")
    api.patch_pod_annotations("default", "old", {"x": "1"})
    api.delete_pod("default", "old")
    assert [next(stream).type, next(stream).type] == ["MODIFIED", "DELETED"]


def test_watch_from_list_version_loses_nothing(api: FakeKubeApi) -> None:
    api.create_node(_node("n1"))
    nodes, rv = api.list_nodes_and_version()
    api.patch_node_labels("n1", {"x": "y"})
    api.create_node(_node("n2"))
    events = list(api.watch_nodes(resource_version=rv, stop_after_s=0.05))
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("MODIFIED", "n1"), ("ADDED", "n2")]
    assert len(nodes) == 1


def test_watch_from_a_trimmed_version_is_gone() -> None:
    api = FakeKubeApi(history=5)
    api.create_pod(_pod("p"))
    _, rv = api.list_pods_and_version()
    for i in range(20):
        api.patch_pod_annotations("default", "p", {"i": str(i)})
    with pytest.raises(KubeApiError) as info:
        next(api.watch_pods(resource_version=rv, stop_after_s=0.05))
    assert info.value.status == 410


def test_concurrent_patches_with_versions_let_exactly_one_writer_win(api: FakeKubeApi) -> None:
    rv = api.create_pod(_pod("p"))["metadata"]["resourceVersion"]
    winners: list[int] = []
    barrier = threading.Barrier(8)

    def writer(i: int) -> None:
        barrier.wait()
        try:
            api.patch_pod_annotations("default", "p", {"owner": str(i)}, resource_version=rv)
            winners.append(i)
        except Conflict:
            pass

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
    assert api.get_pod("default", "p")["metadata"]["annotations"]["owner"] == str(winners[0])


def test_close_ends_open_watches(api: FakeKubeApi) -> None:
    received: list[WatchEvent] = []
    thread = threading.Thread(target=lambda: received.extend(api.watch_pods()))
    thread.start()
    api.create_pod(_pod("p"))
    api.close()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert [e.object["metadata"]["name"] for e in received] == ["p"]


def test_eviction_deletes_the_pod_and_collects_its_configmaps(api: FakeKubeApi) -> None:
    pod = api.create_pod(_pod("p"))
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": pod["metadata"]["uid"]}
    api.create_configmap("default", {"metadata": {"name": "cm", "ownerReferences": [owner]}, "data": {}})
    api.evict_pod("default", "p", pod["metadata"]["uid"])
    assert api.list_pods() == [] and api.list_configmaps() == []
    with pytest.raises(NotFound):
        api.evict_pod("default", "p")


def test_eviction_of_a_replaced_pod_is_a_conflict(api: FakeKubeApi) -> None:
    api.create_pod(_pod("p"))
    with pytest.raises(Conflict):
        api.evict_pod("default", "p", "uid-of-an-older-pod")
    assert [p["metadata"]["name"] for p in api.list_pods()] == ["p"]


@pytest.mark.parametrize(
    ("allowed", "labels", "phase", "evicted"),
    [
        (0, {"app": "web"}, "Running", False),
        (1, {"app": "web"}, "Running", True),
        (0, {"app": "batch"}, "Running", True),
        (0, {"app": "web"}, "Succeeded", True),
    ],
    ids=["budget exhausted", "budget allows one", "budget selects other pods", "finished pod"],
)
def test_eviction_respects_disruption_budgets(api: FakeKubeApi, allowed: int, labels: dict[str, str], phase: str, evicted: bool) -> None:
    api.set_disruption_budget("default", "web", {"app": "web"}, allowed)
    api.create_pod(_pod("p", labels=labels))
    api.set_pod_phase("default", "p", phase)
    if evicted:
        api.evict_pod("default", "p")
    else:
        with pytest.raises(KubeApiError) as info:
            api.evict_pod("default", "p")
        assert info.value.status == 429
    assert (api.list_pods() == []) is evicted


def test_a_budget_allows_only_as_many_evictions_as_it_has_left(api: FakeKubeApi) -> None:
    api.set_disruption_budget("default", "web", {"app": "web"}, 1)
    for name in ("a", "b"):
        api.create_pod(_pod(name, labels={"app": "web"}))
    api.evict_pod("default", "a")
    with pytest.raises(KubeApiError):
        api.evict_pod("default", "b")
    api.set_disruption_budget("default", "web", {"app": "web"}, 1)  # a replacement became ready
    api.evict_pod("default", "b")
    assert api.evicted == [("default", "a"), ("default", "b")]


def _names(pods: list[dict[str, object]]) -> list[str]:
    return [str(p["metadata"]["name"]) for p in pods]  # type: ignore[index]


def test_pods_by_node_follow_creation_binding_and_deletion(api: FakeKubeApi) -> None:
    for node in ("n1", "n2"):
        api.create_node(_node(node))
    api.create_pod({**_pod("preset"), "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}})  # a static/DaemonSet pod
    for name in ("a", "b", "c"):
        uid = api.create_pod(_pod(name, labels={"app": name}))["metadata"]["uid"]
        api.bind_pod("default", name, uid, "n2" if name == "b" else "n1")
    api.delete_pod("default", "c")
    with pytest.raises(Conflict):  # a refused second bind leaves the pod where it was
        api.bind_pod("default", "a", api.get_pod("default", "a")["metadata"]["uid"], "n2")
    api.create_pod(_pod("c"))  # same name again, not bound: on no node

    assert _names(api.list_pods(node_name="n1")) == ["preset", "a"]
    assert _names(api.list_pods(node_name="n2")) == ["b"]
    assert _names(api.list_pods(node_name="n1", label_selector="app=a")) == ["a"]
    assert api.list_pods(node_name="gone") == []
    assert sorted(_names(api.list_pods())) == ["a", "b", "c", "preset"]


def test_deleting_a_pod_collects_the_configmaps_it_owns_now(api: FakeKubeApi) -> None:
    uids = {name: api.create_pod(_pod(name))["metadata"]["uid"] for name in ("p", "q")}

    def owned_by(*names: str) -> dict[str, object]:
        return {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": n, "uid": uids[n]} for n in names]}

    api.create_configmap("default", {"metadata": {"name": "both", **owned_by("p", "q")}})
    api.create_configmap("default", {"metadata": {"name": "moved", **owned_by("p")}})
    api.create_configmap("default", {"metadata": {"name": "q-only", **owned_by("q")}})
    api.create_configmap("default", {"metadata": {"name": "unowned"}})
    api.replace_configmap("default", "moved", {"metadata": {"name": "moved", **owned_by("q")}})  # no longer p's

    api.delete_pod("default", "p")
    assert sorted(_names(api.list_configmaps())) == ["moved", "q-only", "unowned"]
    api.delete_pod("default", "q")
    assert _names(api.list_configmaps()) == ["unowned"]


def test_a_watcher_that_falls_behind_the_kept_history_gets_410_not_a_gap() -> None:
    api = FakeKubeApi(history=5)
    api.create_pod(_pod("p"))
    _, rv = api.list_pods_and_version()
    stream = api.watch_pods(resource_version=rv, stop_after_s=5)
    api.patch_pod_annotations("default", "p", {"i": "first"})
    assert next(stream).object["metadata"]["annotations"] == {"i": "first"}
    for i in range(20):  # while the watcher is not reading, its next events leave the history
        api.patch_pod_annotations("default", "p", {"i": str(i)})
    with pytest.raises(KubeApiError) as info:
        next(stream)
    assert info.value.status == 410 and "too old resource version" in info.value.message


OPTIMISTIC = "the object has been modified; please apply your changes to the latest version and try again"


@pytest.mark.parametrize(
    ("call", "error", "reason", "message"),
    [
        (lambda api, uid: api.get_pod("default", "nope"), NotFound, "NotFound", 'pods "nope" not found'),
        (lambda api, uid: api.get_configmap("default", "nope"), NotFound, "NotFound", 'configmaps "nope" not found'),
        (lambda api, uid: api.create_configmap("default", {"metadata": {"name": "cm"}}), Conflict, "AlreadyExists", 'configmaps "cm" already exists'),
        (lambda api, uid: api.patch_pod_annotations("default", "p", {"a": "1"}, resource_version="1"), Conflict, "Conflict",
         f'Operation cannot be fulfilled on pods "p": {OPTIMISTIC}'),
        (lambda api, uid: api.bind_pod("default", "p", uid, "n1"), Conflict, "Conflict",
         'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1"'),
        (lambda api, uid: api.bind_pod("default", "p", "other-uid", "n1"), Conflict, "Conflict",
         'Operation cannot be fulfilled on pods "p": StorageError: invalid object, Code: 4, Key: /registry/pods/default/p, '
         "ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: other-uid, UID in object meta: {uid}"),
    ],
    ids=["pod missing", "configmap missing", "configmap exists", "stale patch", "bound twice", "UID precondition"],
)
def test_errors_carry_the_api_servers_reason_and_message(
    api: FakeKubeApi, call: Callable[[FakeKubeApi, str], object], error: type[KubeApiError], reason: str, message: str
) -> None:
    """k8s.io/apimachinery pkg/api/errors/errors.go; the binding conflict of kubernetes/kubernetes
    pkg/registry/core/pod/storage/storage.go `BindingREST.assignPod`."""
    api.create_node(_node("n1"))
    uid = api.create_pod(_pod("p"))["metadata"]["uid"]
    api.create_configmap("default", {"metadata": {"name": "cm"}})
    api.bind_pod("default", "p", uid, "n1")
    with pytest.raises(error) as info:
        call(api, uid)
    status = status_of(info.value)
    assert (status.reason, status.message) == (reason, message.format(uid=uid))
