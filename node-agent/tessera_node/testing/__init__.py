"""Test and benchmark doubles for the node side: a kubelet emulator (`kubelet_emulator`).

Like the rest of the node side it may import only `tessera.model`, `tessera.kube` and `tessera_node`;
the control-plane stand-in that binds pods for it (webhook + allocation + Binding) is
tests/support/extender_stand_in.py.
"""
