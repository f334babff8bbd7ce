"""Test and benchmark doubles for the node side: a kubelet emulator and an extender stand-in."""
