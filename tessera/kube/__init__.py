"""The one Kubernetes API seam: `api.KubeApi` (Protocol), `client` (real), `fake` (in memory).

The only package that talks to Kubernetes (the node side uses it too). May import `tessera.model` only.
"""
