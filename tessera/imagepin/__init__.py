"""Pinning the stacks' images by the digests a release resolved (`tessera images lock|pin`)."""
