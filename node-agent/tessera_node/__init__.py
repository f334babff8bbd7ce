"""Tessera's node side: the device plugin and the isolation agent that run on every shared GPU node.

- `deviceplugin`: the kubelet device plugin (v1beta1) for `tessera.dev/gpu-core`, with PodResources;
- `agent`: isolation (MPS, memory limits, online/offline co-location) and GPU metrics;
- `gpu`: the GPU backend (NVML, or a simulated node);
- `cli`: `tessera-node device-plugin|agent` (also `tessera node ...` through entry points);
- `testing`: a kubelet emulator for tests and benchmarks.

Stands beside the runtime, not on it: it may import `tessera.model` (the contract, pools file,
allocation record) and `tessera.kube` (the one Kubernetes adapter), nothing else of `tessera`, and
never the Pulumi layer; `tessera` never imports it (import-linter contracts in pyproject.toml).
"""
