"""Pinning the stacks' images by the digests a release resolved (`tessera images lock|pin`).

May import `tessera.model` (and the layers below the runtime row of the `layers` contract in
pyproject.toml); only the CLI imports it."""
