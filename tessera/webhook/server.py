"""HTTPS adapter for the admission decision: decode, call `admission.review`, encode.

The server is `tessera.httpd.HardenedHTTPServer` with TLS (the same one the extender uses; why
the standard library's, configured: docs/webhook.md, "HTTP server"). The TLS handshake runs in
the connection's thread under the request timeout, so one slow client cannot stall the others,
and a renewed certificate loaded into the live context applies to new connections.

What the API server gets back (it verifies every reply: `staging/src/k8s.io/apiserver/pkg/
admission/plugin/webhook/request/admissionreview.go`, `VerifyAdmissionResponse`, v1.30 and
master: `response` present, `response.uid` equal to the request's, apiVersion/kind
`admission.k8s.io/v1` `AdmissionReview`, `patchType` exactly when there is a `patch`):

- a review we can answer (it has `request.uid`) always gets HTTP 200 with such an AdmissionReview,
  `allowed: false` with a status message when the pod or the request is malformed;
- a body that is not an AdmissionReview v1 with a `request.uid` (no reply could carry the uid)
  gets 400 with our JSON error; the API server then applies the webhook's `failurePolicy`.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

from tessera.httpd import Endpoint, HardenedHTTPServer, HttpError, HttpLimits, Request, Response, Routes, json_response, parse_json
from tessera.httpd.prometheus import metrics_response
from tessera.kube.api import NotFound
from tessera.webhook.admission import InvalidReview, review
from tessera.webhook.metrics import WebhookMetrics, outcome_of
from tessera.webhook.settings import WEBHOOK_PATH, WEBHOOK_QGPU_NAMESPACE_PATH, WebhookSettings
from tessera.webhook.tls import CertBundle, TlsApi, ensure_certificate, sync_ca_bundle

LOG = logging.getLogger("tessera.webhook")


@dataclass(frozen=True)
class ServerSettings:
    """How the webhook listens; `tessera.httpd.HttpLimits` documents the limits."""

    host: str = "0.0.0.0"
    """Default all interfaces: the API server reaches the pod through its Service."""
    port: int = 8443
    """Default 8443: an unprivileged port, so the container runs as non-root without capabilities."""
    max_body_bytes: int = 4 * 1024 * 1024
    """Default 4 MiB: larger than any Pod AdmissionReview (etcd limits objects to 1.5 MiB)."""
    request_timeout_s: float = 10.0
    """Default 10 s: TLS handshake, then each request in full; the API server gives up after the
    webhook's timeoutSeconds (at most 30) anyway."""
    idle_timeout_s: float = 120.0
    """Default 120 s: above the API server's 90 s idle timeout, so it closes idle connections first."""
    max_connections: int = 256
    backlog: int = 1024
    certificate_check_interval_s: float = 60.0
    """Default 60 s: how often a replica re-checks its certificate's expiry and the caBundle (a
    re-created MutatingWebhookConfiguration trusts us again within a minute); two GETs a minute."""
    ca_retry_interval_s: float = 5.0
    """Default 5 s: retry interval while the MutatingWebhookConfiguration does not exist yet (the
    Deployment may start before it: Pulumi waits for the Deployment before creating it)."""
    drain_s: float = 5.0
    """Default 5 s: after SIGTERM, report not-ready and keep serving this long so the Service
    stops routing admission calls here before the socket closes (an in-flight call that fails
    would reject a pod, the webhook fails closed)."""

    def limits(self) -> HttpLimits:
        return HttpLimits.of(self)


class WebhookHttpServer(HardenedHTTPServer):
    def __init__(self, settings: ServerSettings, webhook: WebhookSettings, context: ssl.SSLContext) -> None:
        self.webhook = webhook
        self.draining = threading.Event()
        self.metrics = WebhookMetrics()
        self._endpoints: dict[str, Mapping[str, Endpoint]] = {
            WEBHOOK_PATH: {"POST": self._review_endpoint(namespace_opted_in=False)},
            WEBHOOK_QGPU_NAMESPACE_PATH: {"POST": self._review_endpoint(namespace_opted_in=True)},
            "/healthz": {"GET": self._healthz},
            "/readyz": {"GET": self._readyz},
            "/metrics": {"GET": lambda request: metrics_response(self.metrics.registry, request)},
        }
        super().__init__((settings.host, settings.port), Routes(self._endpoints.get), settings.limits(), tls=context, name="webhook")

    def _review_endpoint(self, *, namespace_opted_in: bool) -> Endpoint:
        def endpoint(request: Request) -> Response:
            started = time.perf_counter()
            try:
                body = parse_json(request.body)
                answer = review(body, self.webhook, namespace_opted_in=namespace_opted_in)
            except InvalidReview as exc:
                self.metrics.observe("invalid", time.perf_counter() - started)
                raise HttpError(HTTPStatus.BAD_REQUEST, str(exc), path=exc.path) from None
            except HttpError:
                self.metrics.observe("invalid", time.perf_counter() - started)
                raise
            response = answer["response"]
            if not response["allowed"]:
                LOG.info("rejected pod (request %s): %s", response["uid"], response["status"]["message"])
            reply = json_response(HTTPStatus.OK, answer)
            self.metrics.observe(outcome_of(answer), time.perf_counter() - started)
            return reply

        return endpoint

    def _healthz(self, request: Request) -> Response:
        return Response(HTTPStatus.OK, b"ok\n", "text/plain")

    def _readyz(self, request: Request) -> Response:
        if self.draining.is_set():
            return Response(HTTPStatus.SERVICE_UNAVAILABLE, b"draining\n", "text/plain")
        return Response(HTTPStatus.OK, b"ok\n", "text/plain")


def load_bundle_into(context: ssl.SSLContext, bundle: CertBundle, directory: Path) -> None:
    """`SSLContext.load_cert_chain` reads files only: write the PEMs to a private directory.
    Loading into a live context switches new connections to the new certificate."""
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_text(bundle.cert_pem, encoding="utf-8")
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(bundle.key_pem)
    context.load_cert_chain(cert_file, key_file)


def server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


@dataclass(frozen=True)
class CertificateState:
    bundle: CertBundle
    ca_trusted: bool
    """True once the webhook configuration's caBundle names our CA."""


def bootstrap_certificate(api: TlsApi, webhook: WebhookSettings, now: dt.datetime) -> CertificateState:
    """Get (or create) the shared certificate and make the webhook configuration trust its CA.
    A missing Secret is an error (the manifests create it); a missing webhook configuration is
    not: it may be created after the webhook is ready, and the renew loop retries."""
    if webhook.tls is None:
        raise ValueError("webhook settings have no `tls` section; pass certificate files instead")
    bundle = ensure_certificate(api, webhook.tls, now)
    name = webhook.tls.webhook_configuration_name
    try:
        changed = sync_ca_bundle(api, name, bundle.ca_pem)
    except NotFound:
        LOG.warning("MutatingWebhookConfiguration %s does not exist yet; serving and retrying", name)
        return CertificateState(bundle, ca_trusted=False)
    if changed:
        LOG.info("set caBundle of MutatingWebhookConfiguration %s", name)
    return CertificateState(bundle, ca_trusted=True)


def renew_loop(
    stop: threading.Event,
    settings: ServerSettings,
    renew: Callable[[], CertificateState],
    apply: Callable[[CertBundle], None],
    current: CertificateState,
) -> None:
    """Re-run the bootstrap until `stop` is set: every `certificate_check_interval_s`, or every
    `ca_retry_interval_s` while the caBundle is not in place; swap in a changed certificate."""

    def interval(state: CertificateState) -> float:
        return settings.certificate_check_interval_s if state.ca_trusted else settings.ca_retry_interval_s

    wait = interval(current)
    while not stop.wait(wait):
        try:
            fresh = renew()
        except Exception as exc:  # keep serving the current certificate; retry soon
            LOG.warning("certificate check failed, keeping the current one: %s", exc)
            wait = settings.ca_retry_interval_s
            continue
        if fresh.bundle != current.bundle:
            apply(fresh.bundle)
            LOG.info("serving a renewed certificate")
        current = fresh
        wait = interval(current)


def _drain_then_shutdown(httpd: WebhookHttpServer, stop: threading.Event, drain_s: float) -> None:
    stop.wait()
    httpd.draining.set()
    LOG.info("stopping: not ready, serving for %.1fs more", drain_s)
    time.sleep(drain_s)
    httpd.shutdown()


def serve(
    settings: ServerSettings,
    webhook: WebhookSettings,
    bundle: CertBundle,
    *,
    renew: Callable[[], CertificateState] | None = None,
    ca_trusted: bool = True,
    ready: Callable[[WebhookHttpServer], None] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Serve until `stop` is set (then drain and return) or the server is shut down. `ready`
    receives the bound server (tests read its port)."""
    context = server_context()
    with tempfile.TemporaryDirectory(prefix="tessera-webhook-") as tmp:
        directory = Path(tmp)
        load_bundle_into(context, bundle, directory)
        httpd = WebhookHttpServer(settings, webhook, context)
        finished = threading.Event()  # ends the renew loop with the server
        if renew is not None:
            threading.Thread(
                target=renew_loop,
                args=(finished, settings, renew, lambda b: load_bundle_into(context, b, directory), CertificateState(bundle, ca_trusted)),
                name="cert-renew",
                daemon=True,
            ).start()
        if stop is not None:
            threading.Thread(target=_drain_then_shutdown, args=(httpd, stop, settings.drain_s), name="drain", daemon=True).start()
        if ready is not None:
            ready(httpd)
        LOG.info("webhook listening on %s:%d", settings.host, httpd.server_address[1])
        try:
            httpd.serve_forever()
        finally:
            finished.set()
            httpd.stop(settings.drain_s)  # requests in progress finish; idle connections close
