"""`tessera inspect` tests; object builders live in `inspect_fixtures` (a uniquely named module)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
