"""The one Kubernetes API seam: `api.KubeApi` (Protocol), `client` (real), `fake` (in memory)."""
