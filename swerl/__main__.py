"""``python -m swerl``: the same as the ``swerl`` command (which needs its console script on PATH)."""

from swerl.cli import main

raise SystemExit(main())
