"""``python -m suite.ioengine``: the guest side of the I/O engine."""
from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
