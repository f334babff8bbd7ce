"""Monitoring as code: metric declarations, scrape objects, Grafana dashboards and alert rules.

`spec` declares metrics (used by every component that serves /metrics); `catalog` lists every
metric a query may use; `dashboards`, `alerts` and `scrape` build the objects that
`tessera.manifests.monitoring` deploys.
"""
