"""Tessera policy pack: `pulumi preview --policy-pack policies [--policy-pack-config FILE]`.

FILE comes from `tessera images policy-config stacks/Pulumi.<stack>.yaml`: the pack requires image
digests exactly when the stack's images.requireDigests does.

The rules are pure functions in `tessera_policies/rules.py`; `tessera_policies/pack.py` wraps them.
"""
from pulumi_policy import EnforcementLevel, PolicyPack

from tessera_policies.pack import build_policies

PolicyPack(name="tessera", enforcement_level=EnforcementLevel.MANDATORY, policies=build_policies())
