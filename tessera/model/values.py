"""Reusable value types of the stack configuration: names, CIDRs, versions, cron, images.

Each validator raises ``ValueError`` with a sentence a user can act on; ``errors.py`` turns it into
a ``path: message`` problem.
"""
from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BeforeValidator, PlainValidator

from tessera.model.cron import parse_cron

_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_K8S_VERSION: Final = re.compile(r"^\d+\.\d+\.\d+$")
_DIGEST: Final = re.compile(r"^sha256:[0-9a-f]{64}$")
_TAG: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_REPOSITORY: Final = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-]{1,2}[a-z0-9]+)*)+$|^[a-z0-9]+([._-][a-z0-9]+)*$")
_ENV_VAR: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(f"{value!r} is not a DNS label (lower-case letters, digits and '-', at most 63 characters, starting and ending with a letter or digit)")
    return value


def check_label_key(key: str) -> str | None:
    """Why ``key`` is not a valid Kubernetes label/taint key, or None when it is."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"label key prefix {prefix!r} is not a DNS subdomain"
    if len(name) > 63 or not _LABEL_NAME.match(name):
        return f"{key!r} is not a valid label key (name part: letters, digits, '-', '_', '.', at most 63 characters)"
    return None


def check_label_value(value: str) -> str | None:
    if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
        return f"{value!r} is not a valid label value (letters, digits, '-', '_', '.', at most 63 characters)"
    return None


def _labels(value: dict[str, str]) -> dict[str, str]:
    for key, text in value.items():
        reason = check_label_key(key) or check_label_value(text)
        if reason:
            raise ValueError(reason)
    return value


def _label_key(value: str) -> str:
    reason = check_label_key(value)
    if reason:
        raise ValueError(reason)
    return value


def _cidr(value: str) -> str:
    try:
        network = ipaddress.IPv4Network(value, strict=False)
    except ValueError:
        raise ValueError(f"{value!r} is not an IPv4 CIDR such as 10.0.0.0/16") from None
    if "/" not in value:
        raise ValueError(f"{value!r} needs a prefix length, e.g. {value}/32")
    if str(network) != value:
        raise ValueError(f"{value!r} has host bits set; did you mean {network}?")
    return value


def _kubernetes_version(value: str) -> str:
    if not _K8S_VERSION.match(value):
        raise ValueError(f"{value!r} is not a Kubernetes version like \"1.30.0\" (no leading 'v')")
    return value


_HEX_ORDER: Final = "0123456789abcdef"
_RUN: Final = 12  # identical or consecutive digits in a row that a real digest (almost) never has


def _longest_run(hex_digits: str, step: int) -> int:
    """Longest run where each digit is the previous one + step (0: identical, 1: ascending, -1: descending)."""
    longest = run = 1
    for prev, cur in zip(hex_digits, hex_digits[1:], strict=False):
        run = run + 1 if _HEX_ORDER.index(cur) - _HEX_ORDER.index(prev) == step else 1
        longest = max(longest, run)
    return longest


def made_up_digest_reason(hex_digits: str) -> str | None:
    """Why 64 hex digits cannot be a real sha256 digest, or None when they may be one.

    A real digest is uniformly random; each rule below holds for one in more than 10^10 of them
    (rule 5 being the loosest, ~10^-11), so only placeholders trip them:
    1. a block of at most 16 digits repeated (`000...`, `deadbeef` x 8, `0123456789abcdef` x 4);
    2. fewer than 8 different digits;
    3. no letter a-f at all;
    4. decimal digits and letters alternating over all 64 characters;
    5. 12 or more identical, ascending or descending digits in a row.
    """
    for period in range(1, 17):
        if hex_digits == (hex_digits[:period] * (64 // period + 1))[:64]:
            return f"repeats {hex_digits[:period]!r}"
    if len(set(hex_digits)) < 8:
        return f"uses only {len(set(hex_digits))} different hex digits"
    if hex_digits.isdecimal():
        return "has no letter a-f"
    kinds = "".join("d" if c.isdecimal() else "l" for c in hex_digits)
    if kinds in ("dl" * 32, "ld" * 32):
        return "alternates a decimal digit and a letter all the way"
    for step, what in ((0, "identical"), (1, "ascending"), (-1, "descending")):
        if _longest_run(hex_digits, step) >= _RUN:
            return f"has {_RUN} or more {what} digits in a row"
    return None


def _digest(value: str) -> str:
    if not _DIGEST.match(value):
        raise ValueError(f"{value!r} is not an image digest (sha256: followed by 64 hex digits)")
    reason = made_up_digest_reason(value.removeprefix("sha256:"))
    if reason:
        raise ValueError(
            f"{value[:19]}... looks made up: it {reason}, which a real sha256 digest never does; "
            "pin the digest the registry reports for the image (e.g. `crane digest IMAGE:TAG`), or leave it out"
        )
    return value


def _tag(value: str) -> str:
    if not _TAG.match(value):
        raise ValueError(f"{value!r} is not an image tag")
    return value


def _repository(value: str) -> str:
    if not _REPOSITORY.match(value):
        raise ValueError(f"{value!r} is not an image repository such as registry.k8s.io/kube-scheduler (no tag, no digest)")
    return value


def _cron(value: str) -> str:
    parse_cron(value)  # raises ValueError with the offending field
    return value


def _env_var(value: str) -> str:
    if not _ENV_VAR.match(value):
        raise ValueError(f"{value!r} is not an environment variable name")
    return value


def _https_url(value: str) -> str:
    if not re.match(r"^https?://[^\s/]+(/\S*)?$", value):
        raise ValueError(f"{value!r} is not an http(s) URL")
    return value


def _stringify(value: Any) -> Any:
    """YAML reads 1.30 as a float; versions must be quoted, but accept ints/floats with a clear error."""
    if isinstance(value, float | int) and not isinstance(value, bool):
        raise ValueError(f"{value!r} must be a quoted string (YAML read it as a number)")
    return value


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _counts(value: Any, what: str) -> dict[str, int]:
    if not isinstance(value, dict) or not value:
        raise ValueError(f"must be {what}")
    for key, count in value.items():
        if not isinstance(key, str) or not _is_count(count):
            raise ValueError(f"must be {what}; {key!r}: {count!r} is not a name with a whole-number count")
    return dict(value)


def _replicas(value: Any) -> int | dict[str, int]:
    if _is_count(value):
        return int(value)
    return _counts(value, "a whole number of replicas, or a mapping of resource name to replicas")


def _mig_layout(value: Any) -> str | dict[str, int]:
    if isinstance(value, str):
        return value
    return _counts(value, "a named MIG layout such as all-1g.5gb, or a mapping of MIG profile to count per GPU")


def _repartition_layout(value: Any) -> int | str | dict[str, int]:
    if _is_count(value):
        return int(value)
    if isinstance(value, str):
        return value
    return _counts(value, "a layout: shares per GPU (shared pools), replicas (timeslice pools) or a MIG layout (mig pools)")


_PULUMI_KEY: Final = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


def _pulumi_key(value: str) -> str:
    if not _PULUMI_KEY.match(value):
        raise ValueError(f"{value!r} is not a config key name (without the tessera: prefix), e.g. grafanaAdminPassword")
    return value


DnsLabel = Annotated[str, AfterValidator(_dns_label)]
PulumiKey = Annotated[str, AfterValidator(_pulumi_key)]
"""The key of a Pulumi secret that a setting names (tessera.model.secrets lists every such setting)."""
LabelKey = Annotated[str, AfterValidator(_label_key)]
Labels = Annotated[dict[str, str], AfterValidator(_labels)]
Cidr = Annotated[str, AfterValidator(_cidr)]
KubernetesVersion = Annotated[str, BeforeValidator(_stringify), AfterValidator(_kubernetes_version)]
ImageDigest = Annotated[str, AfterValidator(_digest)]
ImageTag = Annotated[str, BeforeValidator(_stringify), AfterValidator(_tag)]
ImageRepository = Annotated[str, AfterValidator(_repository)]
CronExpression = Annotated[str, AfterValidator(_cron)]
EnvVarName = Annotated[str, AfterValidator(_env_var)]
Version = Annotated[str, BeforeValidator(_stringify)]
HttpUrl = Annotated[str, AfterValidator(_https_url)]
# unions validated by hand so that a wrong value gives one message, not one per union member
Replicas = Annotated[int | dict[str, int], PlainValidator(_replicas)]
MigLayout = Annotated[str | dict[str, int], PlainValidator(_mig_layout)]
RepartitionLayout = Annotated[int | str | dict[str, int], PlainValidator(_repartition_layout)]
