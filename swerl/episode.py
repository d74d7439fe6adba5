"""Episode records, what a model policy records per step, and the durable JSONL sink.

Both ``policies/`` and ``rollout/`` build and read these records, so they live
below both. ``Episode.to_tokens`` lays an episode out for a trainer (see
``swerl.trajectory``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from swerl.errors import ConfigError

if TYPE_CHECKING:
    from swerl.trajectory import TokenTrajectory


@dataclass
class Sampled:
    """What a model policy records in ``Step.policy`` for one turn, under these key names.

    The full prompt of a turn is ``sequence[:prompt_start] + prompt_ids``, where
    ``sequence`` is everything earlier turns saw and produced (the previous
    turn's full prompt plus its completion). So ``prompt_ids`` is a delta: the
    observation tokens, plus any template tokens that close the previous reply.
    The first turn has ``prompt_start == 0`` and carries its whole prompt, and so
    does a turn whose prompt does not extend the previous ones (a server that
    re-rendered the chat differently): ``to_tokens`` then reports ``exact=False``.
    ``logprobs`` is aligned to ``completion_ids``, or None when the server gave none.
    ``prompt_messages``, ``tools`` (first turn only) and ``observation_role`` let
    ``to_tokens`` lay the messages out when there is no exact record.
    """

    completion_ids: list[int] | None = None
    prompt_ids: list[int] | None = None
    prompt_start: int = 0
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    policy_version: int | None = None
    prompt_messages: list[dict[str, Any]] | None = None
    observation_role: str | None = None
    tools: list[dict[str, Any]] | None = None
    """Tool schemas the chat template rendered into the first prompt (first turn only)."""
    mode: str | None = None
    """How an ``LLMPolicy`` sampled: "tokens" (token ids in and out) or "chat" (messages; inexact)."""

    def to_info(self) -> dict[str, Any]:
        """The keys to merge into ``Decision.info`` (None values left out)."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}

    @classmethod
    def of(cls, policy_info: dict[str, Any]) -> Sampled:
        """Read a step's ``policy`` dict back (other keys are ignored)."""
        return cls(**{f.name: policy_info[f.name] for f in fields(cls) if f.name in policy_info})


@dataclass
class Step:
    index: int
    action: str
    observation: str
    reward: float = 0.0
    duration: float = 0.0
    policy: dict[str, Any] = field(default_factory=dict)
    """What the policy adds: a model's tokens (keys of ``Sampled``), the choice it sampled."""


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
    """Strict grading's findings (reverted paths, missing and skipped tests, refusals); None in official mode."""
    where: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    error: str = ""
    retries: int = 0
    policy_version: int | None = None
    """The oldest policy version that sampled a step of this episode (None: not a versioned model)."""
    age: int | None = None
    """Policy versions the trainer had moved on by when the runner handed the episode out."""

    @property
    def key(self) -> tuple[str, int]:
        return (self.task_id, self.attempt)

    @property
    def infra_error(self) -> bool:
        return self.status == "infra_error"

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (sharing this episode's lists: token arrays are not copied)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["steps"] = [{f.name: getattr(s, f.name) for f in fields(s)} for s in self.steps]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Episode:
        d = dict(d)
        d["steps"] = [Step(**s) for s in d.get("steps", [])]
        return cls(**d)

    def to_json(self) -> str:
        """One JSON line; orjson, as token arrays make the standard library's encoder the bottleneck."""
        return orjson.dumps(self.to_dict(), default=str).decode()

    def to_tokens(self, tokenizer: Any = None) -> TokenTrajectory:
        """The whole multi-turn trajectory as token ids for a trainer (see ``swerl.trajectory``)."""
        from swerl.trajectory import episode_tokens

        return episode_tokens(self, tokenizer)


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
                yield Episode.from_dict(orjson.loads(line))
            except (orjson.JSONDecodeError, TypeError) as e:
                raise ConfigError(f"{p}:{n}: not an episode record: {e}") from None

    @staticmethod
    def done_keys(path: str | os.PathLike, redo_infra: bool = True) -> set[tuple[str, int]]:
        """(task_id, attempt) already finished in ``path``; infra errors are redone by default."""
        return {ep.key for ep in JsonlSink.read(path) if not (redo_infra and ep.infra_error)}
