"""Tessera's policy pack: preview-time guardrails over the resources a stack declares.

`rules` holds the pure rules (standard library only, unit-tested in the main environment);
`pack` adapts them to `pulumi_policy`, which only the pack's own environment installs
(policies/requirements.txt). Imports nothing of Tessera's runtime: the pack runs beside any
program, in its own virtual environment.
"""
