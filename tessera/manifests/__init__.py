"""Manifest builders: pure functions from a validated stack config to Kubernetes objects.

`build_stack` (stack.py) is the whole platform; `tessera render` writes it as YAML and the Pulumi
layer (`tessera_pulumi.platform`) applies it. May import `tessera.model`, and the settings and
layouts of the processes it deploys (`tessera.webhook.settings`, `tessera.repartition`); never the
CLI, the Pulumi layer or the node side.
"""
