"""`tessera webhook serve`: run the mutating admission webhook (wiring only)."""
from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys
import threading
from pathlib import Path
from typing import Any

from tessera.httpd.stopsignal import install_stop_handler
from tessera.kube.api import KubeApiError
from tessera.webhook.settings import DEFAULT_PORT, SettingsError, load_settings
from tessera.webhook.tls import CertBundle


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "webhook", help="run the mutating admission webhook (scheduler name, qGPU aliases, allocation env)"
    )
    actions = parser.add_subparsers(dest="webhook_command", required=True, metavar="ACTION")
    serve = actions.add_parser("serve", help="serve AdmissionReview v1 over HTTPS")
    serve.add_argument("--config", required=True, type=Path, help="webhook settings file (JSON/YAML, rendered by the manifests)")
    serve.add_argument("--host", default="0.0.0.0", help="listen address (default all interfaces)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"listen port (default {DEFAULT_PORT})")
    serve.add_argument("--cert-file", type=Path, help="serve this PEM certificate instead of generating one in the cluster")
    serve.add_argument("--key-file", type=Path, help="private key for --cert-file")
    serve.add_argument("--drain-seconds", type=float, default=5.0, help="after SIGTERM, keep serving (not ready) this long (default 5)")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    serve.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    from tessera.webhook.server import CertificateState, ServerSettings, bootstrap_certificate, serve

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        webhook = load_settings(args.config)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    settings = ServerSettings(host=args.host, port=args.port, drain_s=args.drain_seconds)
    stop = threading.Event()
    install_stop_handler(stop)
    if (args.cert_file is None) != (args.key_file is None):
        print("error: give both --cert-file and --key-file, or neither", file=sys.stderr)
        return 2
    if args.cert_file is not None:
        try:
            bundle = CertBundle(ca_pem="", cert_pem=args.cert_file.read_text(), key_pem=args.key_file.read_text())
        except OSError as exc:
            print(f"error: cannot read certificate files: {exc.strerror}", file=sys.stderr)
            return 2
        serve(settings, webhook, bundle, stop=stop)
        return 0
    if webhook.tls is None:
        print("error: the settings file has no `tls` section; add it or pass --cert-file/--key-file", file=sys.stderr)
        return 2
    try:
        from tessera.webhook.kube_tls import KubernetesTlsApi

        api = KubernetesTlsApi.in_cluster()

        def renew() -> CertificateState:
            return bootstrap_certificate(api, webhook, dt.datetime.now(dt.timezone.utc))

        state = renew()
    except KubeApiError as exc:
        print(
            f"error: certificate bootstrap failed: {exc}; check that Secret {webhook.tls.namespace}/"
            f"{webhook.tls.secret_name} exists (the manifests create it empty) and that the webhook's Role and "
            f"ClusterRole grant get/patch on it and on MutatingWebhookConfiguration {webhook.tls.webhook_configuration_name}",
            file=sys.stderr,
        )
        return 1
    except Exception as exc:  # kubernetes.config.ConfigException: not running in a pod
        print(f"error: cannot reach the Kubernetes API ({exc}); run in a pod or pass --cert-file/--key-file", file=sys.stderr)
        return 1
    serve(settings, webhook, state.bundle, renew=renew, ca_trusted=state.ca_trusted, stop=stop)
    return 0
