"""Build step that ships the top-level configs/ and envs/ inside the wheel (metadata: pyproject.toml),
and the Gymnasium registration hook's two files at the wheel's root.

The repo keeps configs/ and envs/ at its root; a wheel only carries packages. So a
non-editable build copies them into the built package as ``swerl/_data/configs`` and
``swerl/_data/envs``, where ``swerl.resources`` finds them. An editable install reads
the checkout's own directories and copies nothing.

The hook (``swerl/_gymnasium_hook.py``) must run at interpreter start without importing swerl, so
both kinds of install get, at site-packages' top, the files its ``site_files()`` names: a ``.pth``
and a top-level copy of the module. They are made here, at build time; the repo has neither.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType
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


def _hook() -> ModuleType:
    """``swerl/_gymnasium_hook.py`` loaded by path: the build must not import swerl (nor its dependencies)."""
    spec = importlib.util.spec_from_file_location(
        "_swerl_gymnasium_build", ROOT / "swerl" / "_gymnasium_hook.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOOK_FILES: dict[str, bytes] = _hook().site_files()
"""The Gymnasium hook's ``.pth`` and top-level module: a wheel installs them into site-packages,
and ``pip uninstall`` removes them (the wheel's RECORD lists them)."""


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for name, content in HOOK_FILES.items():
            (Path(self.build_lib) / name).write_bytes(content)
        dest = Path(self.build_lib) / "swerl" / "_data"
        shutil.rmtree(dest, ignore_errors=True)  # a stale build dir must not ship removed files
        for src, patterns in DATA.items():
            for pattern in patterns:
                for f in sorted((ROOT / src).glob(pattern)):
                    target = dest / src / f.relative_to(ROOT / src)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, target)


class _StrategyWithHook:
    """setuptools' editable-wheel strategy, plus the hook's files (an editable wheel takes no
    build_py outputs, and the quick start installs editable)."""

    def __init__(self, strategy: Any) -> None:
        self.strategy = strategy

    def __enter__(self) -> _StrategyWithHook:
        self.strategy.__enter__()
        return self

    def __exit__(self, *exc: object) -> Any:
        return self.strategy.__exit__(*exc)

    def __call__(self, wheel: Any, files: Any, mapping: Any) -> None:
        self.strategy(wheel, files, mapping)
        for name, content in HOOK_FILES.items():  # listed in the wheel's RECORD: uninstall removes them
            wheel.writestr(name, content)


cmdclass: dict[str, Any] = {"build_py": BuildPyWithData}
try:  # _select_strategy is setuptools' (>= 64) own hook; without it an editable install lacks the hook
    from setuptools.command.editable_wheel import editable_wheel

    if hasattr(editable_wheel, "_select_strategy"):

        class EditableWheelWithHook(editable_wheel):
            def _select_strategy(self, *args: Any, **kwargs: Any) -> Any:
                return _StrategyWithHook(super()._select_strategy(*args, **kwargs))

        cmdclass["editable_wheel"] = EditableWheelWithHook
except ImportError:  # pragma: no cover
    pass

setup(cmdclass=cmdclass)
