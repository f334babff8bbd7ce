"""HTTPS adapter for the admission decision: decode, call `admission.review`, encode.

Stdlib only (`ThreadingHTTPServer` + `ssl`): the webhook answers small JSON documents and its
latency budget is the API server's `timeoutSeconds`, which a thread per connection meets easily.
The TLS handshake runs in the connection's thread (not in `accept`), so one slow client cannot
stall the others.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tessera.kube.api import NotFound
from tessera.webhook.admission import InvalidReview, review
from tessera.webhook.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from tessera.webhook.metrics import WebhookMetrics, outcome_of
from tessera.webhook.settings import WEBHOOK_PATH, WEBHOOK_QGPU_NAMESPACE_PATH, WebhookSettings
from tessera.webhook.tls import CertBundle, TlsApi, ensure_certificate, sync_ca_bundle

LOG = logging.getLogger("tessera.webhook")


@dataclass(frozen=True)
class ServerSettings:
    """How the webhook listens."""

    host: str = "0.0.0.0"
    """Default all interfaces: the API server reaches the pod through its Service."""
    port: int = 8443
    """Default 8443: an unprivileged port, so the container runs as non-root without capabilities."""
    max_body_bytes: int = 4 * 1024 * 1024
    """Default 4 MiB: larger than any Pod AdmissionReview (etcd limits objects to 1.5 MiB)."""
    connection_timeout_s: float = 10.0
    """Default 10 s: the API server gives up after the webhook's timeoutSeconds anyway."""
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


class WebhookHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, settings: ServerSettings, webhook: WebhookSettings, context: ssl.SSLContext) -> None:
        self.webhook = webhook
        self.limits = settings
        self.draining = threading.Event()
        self.metrics = WebhookMetrics()
        super().__init__((settings.host, settings.port), _Handler)
        self.socket = context.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that drops the connection or fails the TLS handshake is its own problem: one
        # log line, not the stdlib's traceback on stderr.
        exc = sys.exc_info()[1]
        LOG.warning("connection from %s failed: %s", client_address[0] if client_address else "?", exc)


class _Handler(BaseHTTPRequestHandler):
    server: WebhookHttpServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, the API server's delayed ACK
    # would add ~40 ms to every admission.
    disable_nagle_algorithm = True

    def setup(self) -> None:
        # Bound every read, including the TLS handshake, so a silent client frees its thread.
        self.request.settimeout(self.server.limits.connection_timeout_s)
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        LOG.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        if self.path == "/readyz" and self.server.draining.is_set():
            self._send(503, b"draining\n", "text/plain")
        elif self.path in ("/healthz", "/readyz"):
            self._send(200, b"ok\n", "text/plain")
        elif self.path == "/metrics":
            self._send(200, self.server.metrics.render(), METRICS_CONTENT_TYPE)
        else:
            self._send(404, b"not found\n", "text/plain")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        path = self.path.split("?", 1)[0]
        if path not in (WEBHOOK_PATH, WEBHOOK_QGPU_NAMESPACE_PATH):
            self._send(404, b"not found\n", "text/plain")
            return
        try:
            length = int(self.headers.get("Content-Length", "-1"))
        except ValueError:
            length = -1
        if length < 0 or length > self.server.limits.max_body_bytes:
            self.close_connection = True
            self._send(413 if length > 0 else 411, b"body missing or too large\n", "text/plain")
            return
        started = time.perf_counter()
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise InvalidReview("body must be a JSON object")
            answer = review(body, self.server.webhook, namespace_opted_in=path == WEBHOOK_QGPU_NAMESPACE_PATH)
        except (json.JSONDecodeError, UnicodeDecodeError, InvalidReview) as exc:
            self._send(400, json.dumps({"error": str(exc)}).encode())
            self.server.metrics.observe("invalid", time.perf_counter() - started)
            return
        response = answer["response"]
        if not response["allowed"]:
            LOG.info("rejected pod (request %s): %s", response["uid"], response["status"]["message"])
        self._send(200, json.dumps(answer, separators=(",", ":")).encode())
        self.server.metrics.observe(outcome_of(answer), time.perf_counter() - started)


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
            httpd.serve_forever(poll_interval=0.5)
        finally:
            finished.set()
            httpd.server_close()
