"""Registers swerl's Gymnasium ids when Gymnasium is imported, so ``gymnasium.make("swerl/SWE-v0")``
works without ``import swerl`` first.

Gymnasium 1.x dropped plugin entry points, so nothing of swerl's runs when a program imports
only Gymnasium. An install (``pip install .`` or ``-e .``) therefore puts two files at the top of
site-packages, both made at build time from this module by ``setup.py`` (``site_files()``): a copy
of this file as ``_swerl_gymnasium.py`` (a top-level module, so that loading it does not import
the ``swerl`` package and, through it, Gymnasium) and ``swerl-gymnasium.pth``, whose one line
calls ``install()`` at interpreter start. That only puts a finder first in ``sys.meta_path`` (this
module imports nothing but ``os`` and ``sys`` at run time): when ``gymnasium`` itself is imported,
the finder lets the normal import run and then registers the ids with entry points given as
strings, so swerl is imported by ``make`` and not before. The finder removes itself after that one
import. Nothing here may break an interpreter: every failure is swallowed (the
``swerl:swerl/SWE-v0`` form and ``import swerl`` still work). ``SWERL_GYMNASIUM_HOOK=0`` turns it
off; ``pip uninstall swerl`` removes both files (the wheel's RECORD lists them). An editable
install holds a copy too: a change to this file takes effect there on the next ``pip install -e``.
"""

from __future__ import annotations

import os
import sys

SPECS = {"swerl/SWE-v0": "swerl.env.swe_env:SWEEnv"}
"""Gymnasium id -> entry point (``swerl.GYMNASIUM_IDS`` is this dict)."""

MODULE = "_swerl_gymnasium"
"""The top-level name this file is installed under."""
PTH = "swerl-gymnasium.pth"
"""The start-up file that calls ``install()``; site runs a ``.pth`` line that starts with ``import``."""
PTH_LINE = f'import sys; exec("try:\\n import {MODULE}\\n {MODULE}.install()\\nexcept Exception:\\n pass")\n'
"""The ``.pth`` line. ``site`` prints a traceback for a line that raises, at every interpreter start,
so the line swallows its own failure: a ``.pth`` left behind by an older install whose module is gone
(an editable install of a checkout since moved, or of a swerl that kept the module elsewhere) is then
silent instead of a traceback before every program."""


def site_files() -> dict[str, bytes]:
    """The files an install puts at the top of site-packages: name -> content."""
    with open(__file__, "rb") as f:
        source = f.read()
    return {f"{MODULE}.py": source, PTH: PTH_LINE.encode()}


def register(gymnasium: object) -> None:
    """Register each id Gymnasium does not know yet (``import swerl`` later finds them there)."""
    registry = gymnasium.envs.registration.registry  # type: ignore[attr-defined]
    for env_id, entry_point in SPECS.items():
        if env_id not in registry:
            gymnasium.register(id=env_id, entry_point=entry_point)  # type: ignore[attr-defined]


class _Loader:
    """Runs Gymnasium's own loader, then registers. The module keeps the real loader."""

    def __init__(self, loader: object) -> None:
        self.loader = loader

    def create_module(self, spec: object) -> object:
        return self.loader.create_module(spec)  # type: ignore[attr-defined]

    def exec_module(self, module: object) -> None:
        module.__spec__.loader = module.__loader__ = self.loader  # type: ignore[attr-defined]
        self.loader.exec_module(module)  # type: ignore[attr-defined]
        try:
            register(module)
        except Exception:  # never fail Gymnasium's import because of swerl
            pass


class _Finder:
    """A ``sys.meta_path`` entry that answers only for ``gymnasium``, once."""

    done = False

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name != "gymnasium" or self.done:
            return None
        self.done = True
        try:
            for finder in list(sys.meta_path):  # whoever would have found it without this finder
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                        spec.loader = _Loader(spec.loader)
                    sys.meta_path.remove(self)  # safe: a returned spec ends the import's loop
                    return spec
        except Exception:
            pass
        return None


def install() -> None:
    """Called by ``swerl-gymnasium.pth`` at interpreter start; cheap, and never raises."""
    try:
        if os.environ.get("SWERL_GYMNASIUM_HOOK", "1") == "0":
            return
        gymnasium = sys.modules.get("gymnasium")
        if gymnasium is not None:  # already imported (by a sitecustomize): register now
            register(gymnasium)
        elif not any(isinstance(f, _Finder) for f in sys.meta_path):
            sys.meta_path.insert(0, _Finder())  # before the finders that would find Gymnasium
    except Exception:
        pass
