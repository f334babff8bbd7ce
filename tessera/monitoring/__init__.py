"""Monitoring as code: the metric catalog, scrape objects, Grafana dashboards and alert rules.

The metric declarations live in the model (`tessera.model.metrics`); `catalog` lists every
metric a query may use; `dashboards`, `alerts` and `scrape` build the objects that
`tessera.manifests.monitoring` deploys.
"""
