"""Scripted policies: gold, no-op and replay. Each plays a fixed list of actions."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from swerl.env import actions
from swerl.errors import ConfigError
from swerl.policies.base import Decision
from swerl.policies.patch_actions import patch_to_actions
from swerl.tasks.instance import Instance


@dataclass
class Script:
    actions: list[str]
    i: int = 0


class ScriptedPolicy:
    """Plays ``script(task, attempt)``, then submits if the script has not."""

    placement: ClassVar[str] = "actor"

    def script(self, task: Instance, attempt: int) -> list[str]:
        raise NotImplementedError

    def start(self, task: Instance, attempt: int) -> Script:
        return Script(list(self.script(task, attempt)))

    def act(self, state: Script, observation: str) -> Decision:
        if state.i >= len(state.actions):
            return Decision(actions.submit())
        state.i += 1
        return Decision(state.actions[state.i - 1])


class GoldPolicy(ScriptedPolicy):
    """Applies the task's gold patch through the editor (a Harbor task: runs its solve.sh), then submits."""

    def __init__(self, placement: str = "actor") -> None:
        self.placement = placement  # type: ignore[misc]

    def script(self, task: Instance, attempt: int) -> list[str]:
        if task.graded_by_harbor:  # the oracle: solution/solve.sh, as Harbor's OracleAgent runs it
            from swerl.grading.harbor import solution_command

            return [actions.bash(solution_command(task)), actions.submit()]
        return [*patch_to_actions(task.patch), actions.submit()]


class NoOpPolicy(ScriptedPolicy):
    """Submits without changing anything: the empty patch, reward 0."""

    def __init__(self, placement: str = "actor") -> None:
        self.placement = placement  # type: ignore[misc]

    def script(self, task: Instance, attempt: int) -> list[str]:
        return [actions.submit()]


class ReplayPolicy(ScriptedPolicy):
    """Re-issues the actions of recorded episodes, matched by (task_id, attempt)."""

    def __init__(self, episodes: Iterable[Any], upto: int | None = None) -> None:
        self.recorded = {(ep.task_id, ep.attempt): [s.action for s in ep.steps] for ep in episodes}
        self.upto = upto

    def script(self, task: Instance, attempt: int) -> list[str]:
        key = (task.instance_id, attempt)
        if key not in self.recorded:
            raise ConfigError(f"no recorded episode for task {key[0]!r} attempt {key[1]}")
        return self.recorded[key][: self.upto]
