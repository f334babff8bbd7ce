"""The metrics Tessera's components serve, declared once: names, types, labels, meaning.

A contract between our processes and Prometheus, the dashboards and the alerts, like the resource
names in `tessera.model.contract`: the extender, the webhook, the device plugin and the node agent
each register the families of their module here (`extender`, `webhook`, `device_plugin`,
`agent`), tests hold the real `/metrics` endpoints to them, and `tessera.monitoring.catalog`
builds docs/monitoring.md's table and the query cross-check from them. Imports nothing but
`spec` (standard library only).
"""
