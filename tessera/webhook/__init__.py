"""Mutating admission webhook: scheduler name, qGPU aliases, allocation env (see docs/webhook.md)."""
