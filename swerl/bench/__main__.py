"""`python -m swerl.bench NAME [args]` runs ``swerl.bench.NAME.main(args)``."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import swerl.bench


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(swerl.bench.__path__) if not m.name.startswith("_"))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    names = available()
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in names:
        print(f"usage: python -m swerl.bench {{{','.join(names)}}} [options]", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(f"swerl.bench.{argv[0]}")
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
