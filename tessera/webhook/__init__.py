"""Mutating admission webhook: scheduler name, qGPU aliases, allocation env (see docs/webhook.md).

May import `tessera.model` and `tessera.kube`; not the extender or re-partitioning (sibling processes).
"""
