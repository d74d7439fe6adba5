"""How a model's reply becomes an action, for policies that sample token ids themselves.

- ``TextActions``: the reply is the action (a JSON tool call or one bash block), and
  observations come back as user messages.
- ``ToolCallActions``: the tools are rendered by the chat template (``tools=``) and the
  reply carries one ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` (the
  Hermes/Qwen convention); observations come back as ``tool`` messages.
- ``PatchMenu``: a lenient format for tiny untrained models. The first token the model
  samples on its first turn picks one of the task's candidate fixes (the gold patch,
  the suite's plausible wrong patches, or none), which later turns apply through the
  editor and submit. What the model samples decides the reward, so GRPO groups get
  different rewards and the model can learn which choice pays, as in the numpy toy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from swerl.env import actions
from swerl.policies.patch_actions import patch_to_actions
from swerl.tasks.instance import Instance

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


class TextActions:
    tools: ClassVar[list[dict[str, Any]] | None] = None
    observation_role: ClassVar[str] = "user"

    def start(self, task: Instance) -> Any:
        return None

    def action(self, state: Any, reply: str, completion_ids: list[int]) -> str:
        return reply


class ToolCallActions(TextActions):
    tools: ClassVar[list[dict[str, Any]] | None] = actions.TOOLS
    observation_role: ClassVar[str] = "tool"

    def action(self, state: Any, reply: str, completion_ids: list[int]) -> str:
        calls = _TOOL_CALL.findall(reply)
        return calls[0].strip() if len(calls) == 1 else reply  # else the env says what is wrong


@dataclass
class MenuState:
    candidates: list[str]
    script: list[str] = field(default_factory=list)
    choice: int | None = None


class PatchMenu(TextActions):
    def __init__(self, wrong: dict[str, list[str]] | None = None) -> None:
        from swerl.policies.toy import wrong_patches

        self.wrong = wrong_patches() if wrong is None else wrong

    def start(self, task: Instance) -> MenuState:
        return MenuState([task.patch, *self.wrong.get(task.instance_id, []), ""])

    def action(self, state: MenuState, reply: str, completion_ids: list[int]) -> str:
        if state.choice is None:
            n = len(state.candidates)
            state.choice = completion_ids[0] % n if completion_ids else n - 1
            patch = state.candidates[state.choice]
            state.script = [*(patch_to_actions(patch) if patch else []), actions.submit()]
        return state.script.pop(0) if len(state.script) > 1 else state.script[0]
