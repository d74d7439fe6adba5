"""Where tasks come from: one small protocol, one module per source (as ``sandbox/`` has per backend).

A source turns a user's spec (a path, a suite name, a dataset name) into :class:`Instance`
records. ``load_tasks`` recognises the source by the spec's shape; ``kind`` forces it:

- ``harbor``: a Harbor task folder (``task.toml`` + ``instruction.md`` + ``tests/test.sh``) or a
  folder of them;
- ``synth``: a suite directory in swerl's layout (``tasks.jsonl`` + ``repos/*.bundle``), as
  ``swerl tasks synth`` writes it, or a bundled suite name;
- ``swebench``: a SWE-bench-family JSON/JSONL file, a ``datasets`` directory or a Hub name;
  a family name (``swebench-pro``, ``swe-gym``, ``swe-smith``, ``r2e-gym``, ``swe-rebench``)
  forces that family's field names and image convention (see ``swebench.FAMILIES``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Protocol

from swerl.errors import ConfigError
from swerl.tasks.instance import Instance

MODULES = {
    "harbor": "swerl.tasks.sources.harbor",
    "synth": "swerl.tasks.sources.synth",
    "swebench": "swerl.tasks.sources.swebench",
}
"""Each module defines ``SOURCE``, a :class:`TaskSource`; recognition is tried in this order."""


class TaskSource(Protocol):
    """What each source module provides."""

    name: str

    def recognises(self, spec: str) -> bool:
        """True when ``spec`` has this source's shape (cheap: no parsing of records)."""
        ...

    def load(
        self, spec: str, split: str = "test", family: str | None = None, accept: tuple[str, ...] = ()
    ) -> list[Instance]:
        """Every task of ``spec``; ConfigError naming the file and field on bad input. ``accept``:
        fields to run although swerl cannot honour them, each recorded (refused when empty)."""
        ...


def source(name: str) -> TaskSource:
    """The source module called ``name``."""
    if name not in MODULES:
        raise ConfigError(f"unknown task source {name!r}; one of {', '.join(kinds())}")
    return importlib.import_module(MODULES[name]).SOURCE


def kinds() -> list[str]:
    """Every value ``kind`` may take: the sources and the SWE-bench families."""
    from swerl.tasks.sources.swebench import FAMILIES

    return [*MODULES, *(f for f in FAMILIES if f not in MODULES)]


def detect(spec: str | Path) -> str:
    """The name of the source whose shape ``spec`` has."""
    text = str(spec)
    for name in MODULES:
        if source(name).recognises(text):
            return name
    from swerl.tasks.instance import bundled_suites

    raise ConfigError(
        f"{text!r} is not a Harbor task folder, a suite directory, a JSON/JSONL file, a dataset "
        f"directory, a Hugging Face name (owner/name) or a bundled suite ({', '.join(bundled_suites()) or 'none'})"
    )


def load_tasks(
    spec: str | Path, kind: str | None = None, split: str = "test", accept: tuple[str, ...] | list[str] = ()
) -> list[Instance]:
    """Load the tasks of ``spec``; ``kind`` (a source or a SWE-bench family) forces how.

    ``accept``: fields to run although swerl cannot honour them, each deviation recorded in the
    task and its grades (``"*"``: all): Harbor task.toml fields (``swerl.tasks.harbor_fields``)
    or a SWE-bench family's grading fields (``swebench.GRADING_EXTRAS``)."""
    text = str(spec)
    family = None
    if kind and kind not in MODULES:
        from swerl.tasks.sources.swebench import FAMILIES

        if kind not in FAMILIES:
            raise ConfigError(f"unknown task source {kind!r}; one of {', '.join(kinds())}")
        kind, family = "swebench", kind
    name = kind or detect(text)
    if accept:
        if name == "synth":
            raise ConfigError(
                f"{text}: accept= names Harbor or SWE-bench-family fields; a synth suite has none"
            )
        return source(name).load(text, split=split, family=family, accept=tuple(accept))  # type: ignore[call-arg]
    return source(name).load(text, split=split, family=family)


__all__ = ["MODULES", "TaskSource", "detect", "kinds", "load_tasks", "source"]
