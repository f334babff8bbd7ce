"""The one Kubernetes API seam: `api.KubeApi` (Protocol), `client` (real), `fake` (in memory),
`loopback` (the in-memory one served over HTTP, with injectable faults, for tests and benchmarks).

The only package that talks to Kubernetes (the node side uses it too). May import `tessera.model` only.
"""
