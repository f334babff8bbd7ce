"""One hardened HTTP server for every Tessera endpoint: the scheduler extender, the admission
webhook (TLS) and the node agent's and device plugin's /metrics, and the SIGTERM handling every
server process shares (`stopsignal.py`). An event loop holds the connections and worker threads
answer complete requests; `server.py` says why (docs/scheduler-extender.md, "HTTP server").

Imports only the standard library: the runtime and the node side both stand on it (import-linter
contracts `layers` and `node-side` in pyproject.toml)."""
from tessera.httpd.framing import HttpError, HttpLimits
from tessera.httpd.jsonbody import MAX_JSON_DEPTH, error_response, json_bytes, json_response, parse_json, plain_strings, string_map_json
from tessera.httpd.server import Endpoint, HardenedHTTPServer, Request, Response, Routes
from tessera.httpd.stopsignal import install_stop_handler

__all__ = [
    "MAX_JSON_DEPTH",
    "Endpoint",
    "HardenedHTTPServer",
    "HttpError",
    "HttpLimits",
    "Request",
    "Response",
    "Routes",
    "error_response",
    "install_stop_handler",
    "json_bytes",
    "json_response",
    "parse_json",
    "plain_strings",
    "string_map_json",
]
