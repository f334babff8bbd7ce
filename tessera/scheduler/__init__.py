"""The kube-scheduler extender: HTTP adapter, cache of nodes and allocations, binder.

See docs/scheduler-extender.md. Entry point: `ExtenderService` (tessera.scheduler.service), run by
`tessera scheduler serve`.
"""
