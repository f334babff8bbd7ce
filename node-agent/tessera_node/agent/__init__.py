"""The node isolation agent (`tessera node agent`): MPS daemons, memory enforcement, online/offline
co-location, freeze leases and GPU metrics. May import `tessera.model`, `tessera.kube` and the rest of
`tessera_node`.
"""
