"""Tessera's Pulumi layer: the component resources a stack is made of (a thin adapter on top).

- `stack.TesseraStack`: the one top-level component; `program.main` is what `__main__.py` runs;
- `tke`: the TKE network, managed cluster and GPU node pools (Tencent Cloud provider);
- `existing`: an existing cluster, reached through its kubeconfig;
- `platform`: the in-cluster platform, applying the objects `tessera.manifests` builds.

May import `tessera.model`, `tessera.manifests` and the Pulumi SDKs. Nothing imports it but the
program entry (`__main__.py`); the runtime and the node side never do (import-linter contracts in
pyproject.toml).
"""
