"""coordination.k8s.io/v1 Leases of `FakeKubeApi`, kept as the API server keeps them.

- get: 404 `leases.coordination.k8s.io "NAME" not found`;
- create: 409 AlreadyExists when one of that name exists;
- replace (PUT): `metadata.resourceVersion` is required (the Lease strategy refuses unconditional
  updates: kubernetes/kubernetes pkg/registry/coordination/lease/strategy.go,
  `AllowUnconditionalUpdate` false) and must be the stored one, else 409 Conflict with
  store.go's `OPTIMISTIC_LOCK` cause; a PUT of a Lease that does not exist creates it
  (`AllowCreateOnUpdate` true: 201). A `metadata.uid` in the body is a precondition. uid and
  creationTimestamp are kept from the stored Lease (k8s.io/apiserver pkg/registry/rest/update.go
  `BeforeUpdate`).
- every write bumps metadata.resourceVersion; the server never computes spec fields
  (leaseTransitions is the client's to count).
- `spec.acquireTime` / `spec.renewTime` are `MicroTime`: decoding parses them with Go's
  `time.Parse(RFC3339Micro, s)` (k8s.io/apimachinery pkg/apis/meta/v1/micro_time.go,
  `UnmarshalJSON`, v0.30.0 = v0.34.0), which demands exactly six fractional digits; anything else
  is a 400 naming Go's parse error, e.g. `cannot parse ".103Z" as ".000000"`.
- validation (pkg/apis/coordination/validation/validation.go `ValidateLeaseSpec`, and
  `ValidateObjectMeta` with `NameIsDNSSubdomain`): 422 for a missing or malformed name,
  leaseDurationSeconds <= 0, leaseTransitions < 0.

The Lease strategy and validation are read in kubernetes/kubernetes at the commits the code index
holds (strategy.go 152eb4fe, validation.go 02f19cb0); the generic store is k8s.io/apiserver
v0.30.0 and v0.34.0 (store.go `Update`), where one message differs: the "must be specified for an
update" error renders the missing resourceVersion (a uint64) as `0x0` in v1.30 (`%#v`) and as `0`
in v1.34 (JSON). The fake writes v1.30's, the version Tessera's stacks pin.
"""
from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any, Final

from tessera.kube.api import KubeApiError, KubeObject
from tessera.kube.fake_status import (
    LEASES,
    FieldError,
    already_exists,
    bad_request,
    go_quote,
    invalid,
    not_found,
    stale,
    uid_precondition_failed,
)

RFC3339_MICRO: Final = "2006-01-02T15:04:05.000000Z07:00"
_INT32_MAX: Final = 2**31 - 1
_DNS1123_SUBDOMAIN: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS1123_MESSAGE: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
# (layout element, literal before it) of RFC3339Micro, in Go's `nextStdChunk` order
_CHUNKS: Final = (("2006", ""), ("01", "-"), ("02", "-"), ("15", "T"), ("04", ":"), ("05", ":"), (".000000", ""), ("Z07:00", ""))
_RANGES: Final = {"01": ("month", 1, 12), "15": ("hour", 0, 23), "04": ("minute", 0, 59), "05": ("second", 0, 59)}


def _take(elem: str, value: str) -> tuple[int, str] | None:
    """One layout element off the front of `value` as Go's `Parse` takes it: its number (the
    microseconds of the fraction, the offset in minutes of the zone) and the rest; None: cannot."""
    if elem == "2006":
        return (int(value[:4]), value[4:]) if len(value) >= 4 and value[:4].isdigit() else None
    if elem == "15":  # stdHour: one or two digits
        width = 2 if value[:2].isdigit() else 1
        return (int(value[:width]), value[width:]) if value[:1].isdigit() else None
    if elem in ("01", "02", "04", "05"):  # fixed two digits
        return (int(value[:2]), value[2:]) if len(value) >= 2 and value[:2].isdigit() else None
    if elem == ".000000":
        return (int(value[1:7]), value[7:]) if len(value) >= 7 and value[0] in ".," and value[1:7].isdigit() else None
    if value.startswith("Z"):
        return 0, value[1:]
    if len(value) >= 6 and value[0] in "+-" and value[1:3].isdigit() and value[3] == ":" and value[4:6].isdigit():
        minutes = int(value[1:3]) * 60 + int(value[4:6])
        return (-minutes if value[0] == "-" else minutes), value[6:]
    return None


class MicroTimeError(ValueError):
    """Go's `time.Parse(RFC3339Micro, text)` error, worded as Go words it."""


def parse_micro_time(text: str) -> datetime:
    """`text` as Go's `time.Parse(RFC3339Micro, text)` reads it (an aware datetime)."""
    head = f"parsing time {go_quote(text)}"
    value = text
    numbers: dict[str, int] = {}
    for elem, literal in _CHUNKS:
        if literal:
            if not value.startswith(literal):
                raise MicroTimeError(f"{head} as {go_quote(RFC3339_MICRO)}: cannot parse {go_quote(value)} as {go_quote(literal)}")
            value = value[len(literal):]
        taken = _take(elem, value)
        if taken is None:
            raise MicroTimeError(f"{head} as {go_quote(RFC3339_MICRO)}: cannot parse {go_quote(value)} as {go_quote(elem)}")
        numbers[elem], value = taken
        if elem in _RANGES:
            what, low, high = _RANGES[elem]
            if not low <= numbers[elem] <= high:
                raise MicroTimeError(f"{head}: {what} out of range")
    if value:
        raise MicroTimeError(f"{head}: extra text: {go_quote(value)}")
    try:
        zone = timezone(timedelta(minutes=numbers["Z07:00"]))
        return datetime(
            numbers["2006"], numbers["01"], numbers["02"], numbers["15"], numbers["04"], numbers["05"], numbers[".000000"], tzinfo=zone
        )
    except ValueError:
        raise MicroTimeError(f"{head}: day out of range") from None


def _go_json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return f"number {value}"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _decode_error(detail: str) -> KubeApiError:
    return bad_request(f'Lease in version "v1" cannot be handled as a Lease: {detail}')


def _check_decodes(body: KubeObject) -> None:
    """Refuse what the API server's JSON decoder refuses before any validation runs; MicroTimes
    that decode are rewritten in their canonical form."""
    spec = body.get("spec")
    if spec is None:
        return
    if not isinstance(spec, dict):
        raise _decode_error(f"json: cannot unmarshal {_go_json_type(spec)} into Go struct field Lease.spec of type v1.LeaseSpec")
    for key in ("leaseDurationSeconds", "leaseTransitions"):
        value = spec.get(key)
        if value is not None and (type(value) is not int or abs(value) > _INT32_MAX):
            raise _decode_error(f"json: cannot unmarshal {_go_json_type(value)} into Go struct field LeaseSpec.spec.{key} of type int32")
    holder = spec.get("holderIdentity")
    if holder is not None and not isinstance(holder, str):
        raise _decode_error(f"json: cannot unmarshal {_go_json_type(holder)} into Go struct field LeaseSpec.spec.holderIdentity of type string")
    for key in ("acquireTime", "renewTime"):
        value = spec.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise _decode_error(f"json: cannot unmarshal {_go_json_type(value)} into Go value of type string")
        try:
            parsed = parse_micro_time(value)
        except MicroTimeError as exc:
            raise _decode_error(str(exc)) from None
        # stored and answered as `MarshalJSON` writes it: UTC, six digits, "Z"
        spec[key] = parsed.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _validate(name: str, body: KubeObject) -> None:
    errors: list[FieldError] = []
    if not name:
        errors.append(FieldError("metadata.name", "Required value", "name or generateName is required", cause_type="FieldValueRequired"))
    elif len(name) > 253 or not re.fullmatch(_DNS1123_SUBDOMAIN, name):
        detail = f"{_DNS1123_MESSAGE} (e.g. 'example.com', regex used for validation is '{_DNS1123_SUBDOMAIN}')"
        errors.append(FieldError("metadata.name", "Invalid value", detail, go_quote(name)))
    spec = body.get("spec") or {}
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        errors.append(FieldError("spec.leaseDurationSeconds", "Invalid value", "must be greater than 0", str(duration)))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and transitions < 0:
        errors.append(FieldError("spec.leaseTransitions", "Invalid value", "must be greater than or equal to 0", str(transitions)))
    if errors:
        raise invalid("Lease", LEASES.group, name, errors)


class LeaseTable:
    """The Leases of one store. Not locked: `FakeKubeApi` calls it under its lock, hands out
    copies and passes `bump`, which sets the next cluster-wide resourceVersion on an object."""

    def __init__(self, bump: Callable[[KubeObject], None]) -> None:
        self._bump = bump
        self._leases: dict[tuple[str, str], KubeObject] = {}

    def get(self, namespace: str, name: str) -> KubeObject:
        lease = self._leases.get((namespace, name))
        if lease is None:
            raise not_found(LEASES, name)
        return lease

    def create(self, namespace: str, lease: KubeObject) -> KubeObject:
        """Store `lease` (the caller's private copy)."""
        _check_decodes(lease)
        meta = self._metadata(namespace, lease, updating=False)
        name = str(meta.get("name") or "")
        _validate(name, lease)
        if (namespace, name) in self._leases:
            raise already_exists(LEASES, name)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self._store(namespace, name, lease)
        return lease

    def replace(self, namespace: str, name: str, lease: KubeObject) -> tuple[KubeObject, bool]:
        """PUT `lease` (the caller's private copy) as `name`; True when it created the Lease."""
        _check_decodes(lease)
        meta = self._metadata(namespace, lease, updating=True)
        sent_name = meta.get("name")
        if sent_name != name:
            raise bad_request(f"the name of the object ({sent_name or ''}) does not match the name on the URL ({name})")
        old = self._leases.get((namespace, name))
        uid = meta.get("uid")
        if uid and (old is None or old["metadata"]["uid"] != uid):
            raise uid_precondition_failed(LEASES, namespace, name, str(uid), "" if old is None else old["metadata"]["uid"])
        if old is None:
            return self.create(namespace, lease), True
        wanted = meta.get("resourceVersion")
        if not wanted or wanted == "0":  # ParseResourceVersion reads "0" as unset
            rendered = FieldError("metadata.resourceVersion", "Invalid value", "must be specified for an update", "0x0")
            raise invalid(LEASES.resource, LEASES.group, name, [rendered])
        if wanted != old["metadata"]["resourceVersion"]:
            raise stale(LEASES, name)
        _validate(name, lease)
        meta["uid"] = old["metadata"]["uid"]
        meta["creationTimestamp"] = old["metadata"].get("creationTimestamp")
        self._store(namespace, name, lease)
        return lease, False

    def parts(self) -> tuple[object, ...]:
        return (self._leases,)

    @staticmethod
    def _metadata(namespace: str, lease: KubeObject, *, updating: bool) -> dict[str, Any]:
        """The body's metadata in `namespace`. A body naming another namespace is refused with the
        message of the check that runs first upstream: handlers/rest.go `checkName` on update,
        registry/rest/meta.go `EnsureObjectNamespaceMatchesRequestNamespace` on create."""
        meta = lease.get("metadata")
        if meta is None:
            meta = lease["metadata"] = {}
        if not isinstance(meta, dict):
            raise _decode_error(f"json: cannot unmarshal {_go_json_type(meta)} into Go struct field Lease.metadata of type v1.ObjectMeta")
        sent = meta.get("namespace")
        if sent and sent != namespace:
            if updating:
                raise bad_request(f"the namespace of the object ({sent}) does not match the namespace on the request ({namespace})")
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        meta["namespace"] = namespace
        return meta

    def _store(self, namespace: str, name: str, lease: KubeObject) -> None:
        lease["apiVersion"] = "coordination.k8s.io/v1"
        lease["kind"] = "Lease"
        self._bump(lease)
        self._leases[(namespace, name)] = lease
