"""Tessera's DRA kubelet plugin (driver gpu.tessera.dev): ResourceSlices for the node's GPUs,
NodePrepareResources / NodeUnprepareResources for kubelet, CDI specs and the agent's registry.
See docs/dra.md, "Node side: the Tessera DRA kubelet plugin"."""
