"""Suites in swerl's own layout: ``SUITE/tasks.jsonl`` beside ``SUITE/repos/<owner>__<name>.bundle``.

That is what the bundled suites (``envs/*``) and ``swerl tasks synth --out SUITE`` write, so this
source only reads it: the records are SWE-bench-format lines (``swebench.load_file``) and the
bundles are where ``swerl tasks build-images`` finds each repository.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from swerl.errors import ConfigError
from swerl.tasks.instance import SUITES_DIR, Instance, bundled_suites

TASKS_FILE = "tasks.jsonl"


def suite_dir(spec: str) -> Path | None:
    """The suite directory ``spec`` names (a path or a bundled suite name), or None."""
    path = Path(spec)
    if (path / TASKS_FILE).is_file():
        return path
    if "/" not in spec and (SUITES_DIR / spec / TASKS_FILE).is_file():
        return SUITES_DIR / spec
    return None


def bundle_dirs(spec: str) -> list[Path] | None:
    """Where the suite's repository bundles are (None: the default search over ``envs/*/repos``)."""
    d = suite_dir(spec)
    return [d / "repos"] if d is not None and (d / "repos").is_dir() else None


@dataclass(frozen=True)
class SynthSource:
    name: str = "synth"

    def recognises(self, spec: str) -> bool:
        return suite_dir(spec) is not None

    def load(
        self, spec: str, split: str = "test", family: str | None = None, accept: tuple[str, ...] = ()
    ) -> list[Instance]:
        from swerl.tasks.sources.swebench import load_file

        if accept:
            raise ConfigError(
                f"{spec}: accept= names Harbor or SWE-bench-family fields; a synth suite has none"
            )
        d = suite_dir(spec)
        if d is None:
            raise ConfigError(
                f"{spec!r} is not a suite: no {TASKS_FILE} in it (bundled suites: "
                f"{', '.join(bundled_suites()) or 'none'})"
            )
        return load_file(d / TASKS_FILE, family=family)


SOURCE = SynthSource()
