"""The webhook's serving certificate: generated in the cluster, never hand-made.

At start (and periodically) every replica runs `ensure_certificate`:

1. read the TLS Secret (created empty by the manifests, so RBAC can pin `get`/`update` to its
   name: `create` cannot be restricted by `resourceNames`);
2. if it holds a CA + serving certificate for this Service that is not near expiry, use it;
3. otherwise generate a self-signed CA and a serving certificate signed by it and write them with
   the Secret's resourceVersion. When two replicas race, one write wins and the other gets a
   conflict, re-reads and uses the winner's certificate, so all replicas serve one chain;
4. set the CA as `caBundle` of every entry in the MutatingWebhookConfiguration (get/patch are also
   pinned by `resourceNames`).

The API calls go through the narrow `TlsApi` protocol: `kube_tls.KubernetesTlsApi` for a cluster,
an in-memory fake in tests.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tessera.kube.api import Conflict
from tessera.webhook.settings import TlsSettings

CA_KEY: Final = "ca.crt"
CA_PRIVATE_KEY: Final = "ca.key"
CERT_KEY: Final = "tls.crt"
KEY_KEY: Final = "tls.key"
CA_VALIDITY: Final = dt.timedelta(days=3650)
SERVING_VALIDITY: Final = dt.timedelta(days=365)
# Clock skew between the node that issues and the API server that verifies.
BACKDATE: Final = dt.timedelta(minutes=5)
MAX_WRITE_ATTEMPTS: Final = 3


@dataclass(frozen=True)
class CertBundle:
    """PEM text of the CA certificate, the serving certificate and its private key, and the CA's
    private key (kept so a serving certificate is renewed under the same CA: the caBundle the API
    server trusts then never changes while replicas switch over one by one)."""

    ca_pem: str
    cert_pem: str
    key_pem: str
    ca_key_pem: str = ""

    def to_secret_data(self) -> dict[str, str]:
        out = {CA_KEY: self.ca_pem, CERT_KEY: self.cert_pem, KEY_KEY: self.key_pem}
        if self.ca_key_pem:
            out[CA_PRIVATE_KEY] = self.ca_key_pem
        return out

    @staticmethod
    def from_secret_data(data: Mapping[str, str]) -> CertBundle | None:
        if not all(data.get(k) for k in (CA_KEY, CERT_KEY, KEY_KEY)):
            return None
        return CertBundle(data[CA_KEY], data[CERT_KEY], data[KEY_KEY], data.get(CA_PRIVATE_KEY, ""))


@dataclass(frozen=True)
class SecretState:
    """The Secret's decoded data (empty when never filled) and its resourceVersion."""

    data: dict[str, str]
    resource_version: str


class TlsApi(Protocol):
    def read_secret(self, namespace: str, name: str) -> SecretState:
        """Raises `NotFound` when the Secret does not exist."""
        ...

    def write_secret(self, namespace: str, name: str, data: Mapping[str, str], resource_version: str) -> None:
        """Replace the Secret's data; raises `Conflict` when `resource_version` is stale."""
        ...

    def ca_bundles(self, webhook_configuration: str) -> list[str]:
        """The decoded `caBundle` of each webhook entry, in order ("" when unset)."""
        ...

    def set_ca_bundle(self, webhook_configuration: str, ca_pem: str) -> None:
        """Set the `caBundle` of every webhook entry of the configuration."""
        ...


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tessera"), x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()


def _generate_ca(now: dt.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("tessera-webhook-ca")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ca_cert, ca_key


def _issue(ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, dns_names: tuple[str, ...], now: dt.datetime) -> CertBundle:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(dns_names[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + SERVING_VALIDITY, ca_cert.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return CertBundle(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM).decode(),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM).decode(),
        key_pem=_key_pem(key),
        ca_key_pem=_key_pem(ca_key),
    )


def generate_bundle(dns_names: tuple[str, ...], now: dt.datetime) -> CertBundle:
    """A fresh self-signed CA and a serving certificate for `dns_names` signed by it (ECDSA P-256:
    fast to generate at pod start, accepted by the API server's TLS client)."""
    ca_cert, ca_key = _generate_ca(now)
    return _issue(ca_cert, ca_key, dns_names, now)


def reissue_under_ca(bundle: CertBundle, dns_names: tuple[str, ...], now: dt.datetime, renew_before: dt.timedelta) -> CertBundle | None:
    """A new serving certificate signed by the bundle's own CA, when that CA (and its key) can
    still be used; None otherwise."""
    if not bundle.ca_key_pem:
        return None
    try:
        ca_cert = x509.load_pem_x509_certificate(bundle.ca_pem.encode())
        ca_key = serialization.load_pem_private_key(bundle.ca_key_pem.encode(), password=None)
    except ValueError:
        return None
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey) or not _same_public_key(ca_cert, ca_key):
        return None
    if ca_cert.not_valid_after_utc - renew_before <= now:
        return None
    return _issue(ca_cert, ca_key, dns_names, now)


def _same_public_key(cert: x509.Certificate, key: Any) -> bool:
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(cert.public_key().public_bytes(serialization.Encoding.DER, spki) == key.public_key().public_bytes(serialization.Encoding.DER, spki))


def bundle_problem(bundle: CertBundle, dns_names: tuple[str, ...], now: dt.datetime, renew_before: dt.timedelta) -> str | None:
    """Why the bundle cannot be served (None when it can): unreadable, wrong names, not signed by
    its CA, or within `renew_before` of expiry."""
    try:
        ca = x509.load_pem_x509_certificate(bundle.ca_pem.encode())
        cert = x509.load_pem_x509_certificate(bundle.cert_pem.encode())
        key = serialization.load_pem_private_key(bundle.key_pem.encode(), password=None)
    except ValueError as exc:
        return f"unreadable certificate data ({exc})"
    try:
        cert.verify_directly_issued_by(ca)
    except (InvalidSignature, ValueError, TypeError) as exc:
        return f"serving certificate is not signed by the CA ({type(exc).__name__})"
    if not _same_public_key(cert, key):
        return "private key does not match the serving certificate"
    try:
        names = set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        names = set()
    missing = set(dns_names) - names
    if missing:
        return f"serving certificate does not name {sorted(missing)}"
    expires = min(cert.not_valid_after_utc, ca.not_valid_after_utc)
    if expires - renew_before <= now:
        return f"certificate expires {expires.isoformat()}, within the renewal window"
    return None


def ensure_certificate(api: TlsApi, tls: TlsSettings, now: dt.datetime) -> CertBundle:
    """The bundle every replica serves: reuse the Secret's, or generate and store a new one."""
    dns_names = tls.dns_names()
    renew_before = dt.timedelta(days=tls.renew_before_days)
    for _ in range(MAX_WRITE_ATTEMPTS):
        state = api.read_secret(tls.namespace, tls.secret_name)
        stored = CertBundle.from_secret_data(state.data)
        if stored is not None and bundle_problem(stored, dns_names, now, renew_before) is None:
            return stored
        renewed = reissue_under_ca(stored, dns_names, now, renew_before) if stored is not None else None
        fresh = renewed or generate_bundle(dns_names, now)
        try:
            api.write_secret(tls.namespace, tls.secret_name, fresh.to_secret_data(), state.resource_version)
        except Conflict:
            continue  # another replica wrote first: read and use its certificate
        return fresh
    raise RuntimeError(
        f"could not store a certificate in Secret {tls.namespace}/{tls.secret_name} after "
        f"{MAX_WRITE_ATTEMPTS} attempts (constant write conflicts); check what else writes it"
    )


def sync_ca_bundle(api: TlsApi, webhook_configuration: str, ca_pem: str) -> bool:
    """Point the webhook configuration at our CA; True when it had to be changed."""
    bundles = api.ca_bundles(webhook_configuration)
    if bundles and all(b == ca_pem for b in bundles):
        return False
    api.set_ca_bundle(webhook_configuration, ca_pem)
    return True
