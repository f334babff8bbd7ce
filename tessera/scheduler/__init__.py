"""The kube-scheduler extender: HTTP adapter, cache of nodes and allocations, binder.

See docs/scheduler-extender.md. Entry point: `ExtenderService` (tessera.scheduler.service), run by
`tessera scheduler serve`.

May import `tessera.model`, `tessera.alloc`, `tessera.kube` and the trace reader of `tessera.sim`; not the
webhook or re-partitioning (sibling processes), nor anything above.
"""
