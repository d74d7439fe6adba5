"""Build step that ships the top-level configs/ and envs/ inside the wheel (metadata: pyproject.toml),
and the Gymnasium registration hook's ``.pth`` at the wheel's root.

The repo keeps configs/ and envs/ at its root; a wheel only carries packages. So a
non-editable build copies them into the built package as ``swerl/_data/configs`` and
``swerl/_data/envs``, where ``swerl.resources`` finds them. An editable install reads
the checkout's own directories and copies nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
DATA = {
    "configs": ["*.yaml"],
    "envs/swerl-mini": ["*.jsonl", "*.md", "*.py", "repos/*.bundle"],
    "envs/harbor-demo": [
        "*.md",
        "*/task.toml",
        "*/instruction.md",
        "*/environment/*",
        "*/tests/*",
        "*/solution/*",
    ],
}
"""What the wheel carries, per source directory: suite data, its generator scripts, no caches."""


PTH = "swerl-gymnasium.pth"
"""One line run at interpreter start: registers swerl's Gymnasium ids when Gymnasium is imported
(``_swerl_gymnasium``). A wheel installs it into site-packages, and ``pip uninstall`` removes it."""


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        shutil.copy2(ROOT / PTH, Path(self.build_lib) / PTH)
        dest = Path(self.build_lib) / "swerl" / "_data"
        shutil.rmtree(dest, ignore_errors=True)  # a stale build dir must not ship removed files
        for src, patterns in DATA.items():
            for pattern in patterns:
                for f in sorted((ROOT / src).glob(pattern)):
                    target = dest / src / f.relative_to(ROOT / src)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, target)


class _StrategyWithPth:
    """setuptools' editable-wheel strategy, plus the hook's ``.pth`` (an editable wheel takes no
    build_py outputs, and the quick start installs editable)."""

    def __init__(self, strategy: Any) -> None:
        self.strategy = strategy

    def __enter__(self) -> _StrategyWithPth:
        self.strategy.__enter__()
        return self

    def __exit__(self, *exc: object) -> Any:
        return self.strategy.__exit__(*exc)

    def __call__(self, wheel: Any, files: Any, mapping: Any) -> None:
        self.strategy(wheel, files, mapping)
        wheel.writestr(PTH, (ROOT / PTH).read_bytes())  # listed in the wheel's RECORD: uninstall removes it


cmdclass: dict[str, Any] = {"build_py": BuildPyWithData}
try:  # _select_strategy is setuptools' (>= 64) own hook; without it an editable install lacks the .pth
    from setuptools.command.editable_wheel import editable_wheel

    if hasattr(editable_wheel, "_select_strategy"):

        class EditableWheelWithPth(editable_wheel):
            def _select_strategy(self, *args: Any, **kwargs: Any) -> Any:
                return _StrategyWithPth(super()._select_strategy(*args, **kwargs))

        cmdclass["editable_wheel"] = EditableWheelWithPth
except ImportError:  # pragma: no cover
    pass

setup(cmdclass=cmdclass)
