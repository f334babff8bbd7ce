"""The kubelet device plugin (`tessera node device-plugin`): advertises `tessera.dev/gpu-core`,
allocates from the extender's record, checks each container at PreStartContainer. May import
`tessera.model`, `tessera.kube` and the rest of `tessera_node`.
"""
