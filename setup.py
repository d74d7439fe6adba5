"""Build step that ships the top-level configs/ and envs/ inside the wheel (metadata: pyproject.toml).

The repo keeps configs/ and envs/ at its root; a wheel only carries packages. So a
non-editable build copies them into the built package as ``swerl/_data/configs`` and
``swerl/_data/envs``, where ``swerl.resources`` finds them. An editable install reads
the checkout's own directories and copies nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
DATA = {
    "configs": ["*.yaml"],
    "envs/swerl-mini": ["*.jsonl", "*.md", "*.py", "repos/*.bundle"],
    "envs/harbor-demo": ["*.md", "*/task.toml", "*/instruction.md", "*/environment/*", "*/tests/*", "*/solution/*"],
}
"""What the wheel carries, per source directory: suite data, its generator scripts, no caches."""


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "swerl" / "_data"
        shutil.rmtree(dest, ignore_errors=True)  # a stale build dir must not ship removed files
        for src, patterns in DATA.items():
            for pattern in patterns:
                for f in sorted((ROOT / src).glob(pattern)):
                    target = dest / src / f.relative_to(ROOT / src)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, target)


setup(cmdclass={"build_py": BuildPyWithData})
