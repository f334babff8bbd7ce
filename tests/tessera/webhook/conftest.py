"""Fixtures for the webhook tests live in `webhook_helpers` (a uniquely named module, importable from tests)."""
from webhook_helpers import localhost_bundle, webhook

__all__ = ["localhost_bundle", "webhook"]
