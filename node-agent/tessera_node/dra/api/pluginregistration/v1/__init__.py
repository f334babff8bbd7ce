"""Generated kubelet API bindings (see scripts/gen-protos.sh)."""
