"""Tessera: GPU sharing for Kubernetes. This package is the domain model and the runtime.

One-way layers, top to bottom (enforced by the import-linter contracts in pyproject.toml; drawn in
docs/architecture.md). A package may import the layers below it, never one above it or a sibling
marked `|`:

    cli                                   the `tessera` command: wiring only
    manifests | inspect                   manifest builders; the read-only cluster view
    scheduler | webhook | repartition     the extender, the admission webhook, scheduled MIG layouts
    sim                                   the trace replay planner
    alloc | kube                          allocation model and policies; the one Kubernetes adapter
    model                                 stack config, catalog, rules, cross-process contract

Nothing here imports the Pulumi layer (`tessera_pulumi`, in components/) or the node side
(`tessera_node`, in node-agent/). Importing `tessera.model` loads nothing else of ours, so this file
imports nothing.
"""
