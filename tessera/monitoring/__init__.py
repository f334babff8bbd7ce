"""Monitoring as code: the metric catalog, scrape objects, Grafana dashboards and alert rules.

The metric declarations live in the model (`tessera.model.metrics`); `catalog` lists every
metric a query may use; `dashboards`, `alerts` and `scrape` build the objects that
`tessera.manifests.monitoring` deploys.

May import `tessera.model` and the layers below it (contract `layers` in pyproject.toml); the
manifest builders and the CLI import it, the node side never does.
"""
