"""The `tessera` command line: one module per subcommand, each with `register()`; wiring only.

The top of the runtime: it may import every `tessera` package below it, but not the Pulumi layer
(`tessera_pulumi`) nor the node side (`tessera node ...` reaches `tessera_node` through entry points,
see `node`).
"""
