"""Leases in the in-memory API server answer as the API server does, word for word.

Expected messages are upstream's: k8s.io/apimachinery pkg/api/errors/errors.go (NewNotFound,
NewAlreadyExists, NewConflict, NewInvalid), k8s.io/apiserver pkg/registry/generic/registry/store.go
(OptimisticLockErrorMsg, "must be specified for an update"), Go's time.Parse errors for MicroTime."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tessera.kube.api import Conflict, KubeApi, KubeApiError, NotFound
from tessera.kube.client import KubernetesClientApi
from tessera.kube.fake import FakeKubeApi
from tessera.kube.fake_status import status_of

NS = "tessera-system"
OPTIMISTIC = "the object has been modified; please apply your changes to the latest version and try again"


def lease(holder: str = "replica-a", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "tessera-extender", "namespace": NS},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 4, "acquireTime": "2026-11-28T10:00:00.000000Z",
                 "renewTime": "2026-11-28T10:00:00.000000Z", "leaseTransitions": 0, **spec},
    }


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    fake = FakeKubeApi()
    yield fake
    fake.close()


def test_the_fake_and_the_client_have_every_verb_of_the_kube_api_protocol(api: FakeKubeApi) -> None:
    typed: KubeApi = api
    verbs = [name for name in vars(KubeApi) if not name.startswith("_")]
    assert {"get_lease", "create_lease", "replace_lease"} <= set(verbs)
    assert [v for v in verbs if not callable(getattr(typed, v, None))] == []
    assert [v for v in verbs if not callable(getattr(KubernetesClientApi, v, None))] == []


def test_a_lease_round_trips_and_every_write_bumps_its_resource_version(api: FakeKubeApi) -> None:
    created = api.create_lease(NS, lease())
    assert created["spec"]["holderIdentity"] == "replica-a" and created["metadata"]["uid"]
    assert api.get_lease(NS, "tessera-extender") == created
    renewed = dict(created, spec={**created["spec"], "renewTime": "2026-11-28T10:00:01.500000Z"})
    after = api.replace_lease(NS, "tessera-extender", renewed)
    assert int(after["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert (after["metadata"]["uid"], after["metadata"]["creationTimestamp"]) == (created["metadata"]["uid"], created["metadata"]["creationTimestamp"])
    assert api.get_lease(NS, "tessera-extender")["spec"]["renewTime"] == "2026-11-28T10:00:01.500000Z"


def _replace_with(version: str | None) -> Callable[[FakeKubeApi], Any]:
    def call(api: FakeKubeApi) -> Any:
        body = lease("replica-b")
        if version is not None:
            body["metadata"]["resourceVersion"] = version
        return api.replace_lease(NS, "tessera-extender", body)

    return call


@pytest.mark.parametrize(
    ("call", "error", "code", "reason", "message"),
    [
        (lambda api: api.get_lease(NS, "missing"), NotFound, 404, "NotFound", 'leases.coordination.k8s.io "missing" not found'),
        (lambda api: api.create_lease(NS, lease()), Conflict, 409, "AlreadyExists", 'leases.coordination.k8s.io "tessera-extender" already exists'),
        (_replace_with("999"), Conflict, 409, "Conflict", f'Operation cannot be fulfilled on leases.coordination.k8s.io "tessera-extender": {OPTIMISTIC}'),
        (_replace_with("0"), KubeApiError, 422, "Invalid",
         'leases.coordination.k8s.io "tessera-extender" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update'),
        (lambda api: api.replace_lease(NS, "other", lease()), KubeApiError, 400, "BadRequest",
         "the name of the object (tessera-extender) does not match the name on the URL (other)"),
        (lambda api: api.create_lease("elsewhere", lease()), KubeApiError, 400, "BadRequest",
         "the namespace of the provided object does not match the namespace sent on the request"),
    ],
    ids=["get missing", "create existing", "stale version", "no version", "name differs from URL", "namespace differs"],
)
def test_lease_errors_carry_upstream_status(
    api: FakeKubeApi, call: Callable[[FakeKubeApi], Any], error: type[KubeApiError], code: int, reason: str, message: str
) -> None:
    api.create_lease(NS, lease())
    with pytest.raises(error) as info:
        call(api)
    status = status_of(info.value)
    assert (status.code, status.reason, status.message) == (code, reason, message)
    assert api.get_lease(NS, "tessera-extender")["spec"]["holderIdentity"] == "replica-a"


def test_a_put_of_a_missing_lease_creates_it_but_a_uid_precondition_refuses(api: FakeKubeApi) -> None:
    created, was_created = api.put_lease(NS, "tessera-extender", lease())
    assert was_created and created["metadata"]["resourceVersion"]
    body = lease()
    body["metadata"].update(name="second", uid="0000-gone")
    with pytest.raises(Conflict) as info:
        api.replace_lease(NS, "second", body)
    assert info.value.message == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "second": StorageError: invalid object, Code: 4, '
        "Key: /registry/leases/tessera-system/second, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: "
        "UID in precondition: 0000-gone, UID in object meta: "
    )


@pytest.mark.parametrize(
    ("renew_time", "message"),
    [
        ("2026-08-11T19:37:19.103Z", 'cannot parse ".103Z" as ".000000"'),  # JavaScript's toISOString()
        ("2026-11-28T10:00:00+00:00", 'cannot parse "+00:00" as ".000000"'),  # Python's isoformat() at 0 microseconds
        ("2020-02-28T20:11:41.636526400Z", 'cannot parse "400Z" as "Z07:00"'),  # nanoseconds
        ("2026-13-28T10:00:00.000000Z", ": month out of range"),
        ("2026-02-30T10:00:00.000000Z", ": day out of range"),
    ],
)
def test_micro_times_must_have_six_fractional_digits(api: FakeKubeApi, renew_time: str, message: str) -> None:
    with pytest.raises(KubeApiError) as info:
        api.create_lease(NS, lease(renewTime=renew_time))
    assert info.value.status == 400
    assert info.value.message.startswith(f'Lease in version "v1" cannot be handled as a Lease: parsing time "{renew_time}"')
    assert info.value.message.endswith(message)
    with pytest.raises(NotFound):
        api.get_lease(NS, "tessera-extender")


def test_a_micro_time_with_an_offset_is_stored_in_utc(api: FakeKubeApi) -> None:
    stored = api.create_lease(NS, lease(renewTime="2026-11-28T12:00:00.250000+02:00"))
    assert stored["spec"]["renewTime"] == "2026-11-28T10:00:00.250000Z"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"spec": {"leaseDurationSeconds": 0}}, "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"),
        ({"spec": {"leaseTransitions": -1}}, "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0"),
        ({"metadata": {"name": "Not_A_Name"}}, 'metadata.name: Invalid value: "Not_A_Name": a lowercase RFC 1123 subdomain'),
        ({"spec": {"leaseDurationSeconds": "4"}}, "json: cannot unmarshal string into Go struct field LeaseSpec.spec.leaseDurationSeconds of type int32"),
    ],
)
def test_invalid_leases_are_refused_before_anything_is_stored(api: FakeKubeApi, change: dict[str, dict[str, Any]], message: str) -> None:
    body = lease()
    for part, fields in change.items():
        body[part].update(fields)
    with pytest.raises(KubeApiError) as info:
        api.create_lease(NS, body)
    assert info.value.status in (400, 422) and message in info.value.message
    assert api.resource_version == "0"
