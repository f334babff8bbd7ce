"""Certificate bootstrap: generated in the cluster, shared by replicas, trusted by the API server."""
from __future__ import annotations

import dataclasses
import datetime as dt
import http.client
import ssl
import threading

import pytest
from webhook_helpers import NOW, InMemoryTlsApi, start_webhook

from tessera.kube.api import NotFound
from tessera.webhook.server import CertificateState, ServerSettings, bootstrap_certificate, renew_loop
from tessera.webhook.settings import TlsSettings, WebhookSettings
from tessera.webhook.tls import CertBundle, SecretState, bundle_problem, ensure_certificate, generate_bundle, sync_ca_bundle

TLS = TlsSettings(namespace="tessera-system", service_name="tessera-webhook", secret_name="tessera-webhook-tls", webhook_configuration_name="tessera-webhook")
SETTINGS = WebhookSettings(shared_pools=frozenset({"a"}), tls=TLS)


def _api(data: dict[str, str] | None = None) -> InMemoryTlsApi:
    api = InMemoryTlsApi()
    api.secrets[(TLS.namespace, TLS.secret_name)] = SecretState(data=dict(data or {}), resource_version="1")
    api.webhooks[TLS.webhook_configuration_name] = ["", ""]
    return api


def test_first_replica_generates_and_stores_a_bundle_and_sets_ca_bundle() -> None:
    api = _api()
    bundle = bootstrap_certificate(api, SETTINGS, NOW).bundle
    assert api.writes == 1
    assert CertBundle.from_secret_data(api.read_secret(TLS.namespace, TLS.secret_name).data) == bundle
    assert bundle_problem(bundle, TLS.dns_names(), NOW, dt.timedelta(days=30)) is None
    assert api.ca_bundles(TLS.webhook_configuration_name) == [bundle.ca_pem, bundle.ca_pem]


def test_second_replica_reuses_the_stored_bundle() -> None:
    api = _api()
    first = bootstrap_certificate(api, SETTINGS, NOW).bundle
    second = bootstrap_certificate(api, SETTINGS, NOW + dt.timedelta(days=1)).bundle
    assert second == first
    assert api.writes == 1


def test_racing_replicas_end_up_serving_the_winners_certificate() -> None:
    api = _api()
    winner = generate_bundle(TLS.dns_names(), NOW)
    api.race = lambda: winner  # another replica stores its bundle between our read and our write
    assert ensure_certificate(api, TLS, NOW) == winner
    assert api.writes == 0


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda: generate_bundle(TLS.dns_names(), NOW - dt.timedelta(days=350)), "renewal window"),
        (lambda: generate_bundle(("other.svc",), NOW), "does not name"),
        (lambda: dataclasses.replace(generate_bundle(TLS.dns_names(), NOW), ca_pem=generate_bundle(TLS.dns_names(), NOW).ca_pem), "not signed"),
        (lambda: dataclasses.replace(generate_bundle(TLS.dns_names(), NOW), key_pem=generate_bundle(TLS.dns_names(), NOW).key_pem), "does not match"),
        (lambda: CertBundle("garbage", "garbage", "garbage"), "unreadable"),
    ],
    ids=["near-expiry", "wrong-names", "foreign-ca", "foreign-key", "garbage"],
)
def test_unusable_stored_bundle_is_replaced(make: object, fragment: str) -> None:
    stale: CertBundle = make()  # type: ignore[operator]
    problem = bundle_problem(stale, TLS.dns_names(), NOW, dt.timedelta(days=30))
    assert problem is not None and fragment in problem
    api = _api(stale.to_secret_data())
    fresh = ensure_certificate(api, TLS, NOW)
    assert fresh != stale and api.writes == 1


def test_ca_bundle_sync_is_a_no_op_when_already_trusted() -> None:
    api = _api()
    bundle = bootstrap_certificate(api, SETTINGS, NOW).bundle
    assert sync_ca_bundle(api, TLS.webhook_configuration_name, bundle.ca_pem) is False


def test_missing_secret_is_reported() -> None:
    api = InMemoryTlsApi()
    with pytest.raises(NotFound):
        ensure_certificate(api, TLS, NOW)


def test_renew_loop_swaps_in_a_changed_bundle_and_stops() -> None:
    current = CertificateState(generate_bundle(TLS.dns_names(), NOW), ca_trusted=True)
    renewed = CertificateState(generate_bundle(TLS.dns_names(), NOW), ca_trusted=True)
    applied: list[CertBundle] = []
    stop = threading.Event()

    def apply(bundle: CertBundle) -> None:
        applied.append(bundle)
        stop.set()

    settings = ServerSettings(certificate_check_interval_s=0.01)
    thread = threading.Thread(target=renew_loop, args=(stop, settings, lambda: renewed, apply, current))
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    assert applied == [renewed.bundle]


def test_webhook_configuration_created_after_the_webhook_gets_its_ca_bundle() -> None:
    # Pulumi creates the configuration only once the Deployment is ready: start without it.
    api = _api()
    del api.webhooks[TLS.webhook_configuration_name]
    first = bootstrap_certificate(api, SETTINGS, NOW)
    assert first.ca_trusted is False
    stop = threading.Event()
    calls = {"n": 0}

    def renew() -> CertificateState:
        calls["n"] += 1
        if calls["n"] == 2:
            api.webhooks[TLS.webhook_configuration_name] = ["", ""]  # kubectl/Pulumi creates it now
        state = bootstrap_certificate(api, SETTINGS, NOW)
        if state.ca_trusted:
            stop.set()
        return state

    # a long check interval: only the short retry interval can get here in time
    settings = ServerSettings(certificate_check_interval_s=3600, ca_retry_interval_s=0.01)
    thread = threading.Thread(target=renew_loop, args=(stop, settings, renew, lambda _b: None, first))
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    assert api.ca_bundles(TLS.webhook_configuration_name) == [first.bundle.ca_pem] * 2


def test_server_presents_the_bootstrapped_certificate_to_a_client_trusting_the_ca_bundle() -> None:
    api = _api()
    tls = dataclasses.replace(TLS, service_name="localhost")  # the test client connects to "localhost"
    settings = dataclasses.replace(SETTINGS, tls=tls)
    bundle = bootstrap_certificate(api, settings, dt.datetime.now(dt.timezone.utc)).bundle
    server, thread = start_webhook(settings, bundle)
    try:
        ca_bundle = api.ca_bundles(TLS.webhook_configuration_name)[0]  # what the API server would trust
        conn = http.client.HTTPSConnection("localhost", server.server_address[1], context=ssl.create_default_context(cadata=ca_bundle), timeout=10)
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
        conn.close()
        untrusting = http.client.HTTPSConnection("localhost", server.server_address[1], context=ssl.create_default_context(), timeout=10)
        with pytest.raises(ssl.SSLCertVerificationError):
            untrusting.request("GET", "/healthz")
    finally:
        server.shutdown()
        thread.join(10)


def test_serving_certificate_is_renewed_under_the_same_ca_so_trust_never_breaks() -> None:
    old = generate_bundle(TLS.dns_names(), NOW - dt.timedelta(days=350))  # leaf expires in 15 days
    api = _api(old.to_secret_data())
    api.webhooks[TLS.webhook_configuration_name] = [old.ca_pem, old.ca_pem]
    state = bootstrap_certificate(api, SETTINGS, NOW)
    assert state.bundle.cert_pem != old.cert_pem
    assert state.bundle.ca_pem == old.ca_pem  # replicas still serving the old leaf stay trusted
    assert api.ca_bundles(TLS.webhook_configuration_name) == [old.ca_pem, old.ca_pem]
    assert bundle_problem(state.bundle, TLS.dns_names(), NOW, dt.timedelta(days=30)) is None


def test_bundle_without_ca_key_is_replaced_whole() -> None:
    old = dataclasses.replace(generate_bundle(TLS.dns_names(), NOW - dt.timedelta(days=350)), ca_key_pem="")
    fresh = ensure_certificate(_api(old.to_secret_data()), TLS, NOW)
    assert fresh.ca_pem != old.ca_pem
