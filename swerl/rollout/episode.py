"""Episode records and the durable JSONL sink a rerun resumes from."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from swerl.errors import ConfigError


@dataclass
class Step:
    index: int
    action: str
    observation: str
    reward: float = 0.0
    duration: float = 0.0
    policy: dict[str, Any] = field(default_factory=dict)
    """What the policy adds: tokens, logprobs, the choice it sampled."""


@dataclass
class Episode:
    """One finished attempt at one task, with its reward and where it ran."""

    task_id: str
    attempt: int
    steps: list[Step] = field(default_factory=list)
    patch: str = ""
    status: str = ""
    """A grading status (resolved, unresolved, patch_failed, empty_patch, infra_error) or "ungraded"."""
    reward: float | None = None
    reason: str = ""
    grade: dict[str, Any] = field(default_factory=dict)
    integrity: dict[str, Any] | None = None
    """Strict grading's findings (stripped paths, missing and skipped tests); None in official mode."""
    where: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    error: str = ""
    retries: int = 0

    @property
    def key(self) -> tuple[str, int]:
        return (self.task_id, self.attempt)

    @property
    def infra_error(self) -> bool:
        return self.status == "infra_error"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Episode:
        d = dict(d)
        d["steps"] = [Step(**s) for s in d.get("steps", [])]
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), allow_nan=False, default=str)


def reward_of(value: float | None) -> float | None:
    """Normalise an env reward: NaN (infra failure) becomes None, never 0."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


class JsonlSink:
    """Appends one line per finished episode, flushed and fsynced.

    A driver killed mid-write leaves at most one partial last line, which
    ``read`` skips, so every complete line always parses.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._repair_tail()
        self._fh = self.path.open("a", encoding="utf-8")

    def _repair_tail(self) -> None:
        """Cut a partial last line (a crash mid-write) so appends start on a fresh line."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        data = self.path.read_bytes()
        if not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            with self.path.open("r+b") as f:
                f.truncate(cut)

    def write(self, episode: Episode) -> None:
        self._fh.write(episode.to_json() + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def read(path: str | os.PathLike) -> Iterator[Episode]:
        """Every complete episode in the file (a partial last line is skipped)."""
        p = Path(path)
        if not p.exists():
            return
        with p.open(encoding="utf-8") as f:
            lines = f.readlines()
        for n, line in enumerate(lines, 1):
            if not line.endswith("\n"):
                break  # interrupted write
            try:
                yield Episode.from_dict(json.loads(line))
            except (json.JSONDecodeError, TypeError) as e:
                raise ConfigError(f"{p}:{n}: not an episode record: {e}") from None

    @staticmethod
    def done_keys(path: str | os.PathLike, redo_infra: bool = True) -> set[tuple[str, int]]:
        """(task_id, attempt) already finished in ``path``; infra errors are redone by default."""
        return {ep.key for ep in JsonlSink.read(path) if not (redo_infra and ep.infra_error)}
