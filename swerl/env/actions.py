"""Actions as an LLM writes them, parsed into tool calls.

Accepted forms (exactly one call per reply):

- a JSON tool call: ``{"tool": "bash", "command": "ls"}``,
  ``{"tool": "editor", "command": "str_replace", "path": ..., "old_str": ..., "new_str": ...}``,
  ``{"tool": "submit"}``;
- the OpenAI function-call shape: ``{"name": "bash", "arguments": "{\\"command\\": \\"ls\\"}"}``,
  ``{"type": "function", "function": {...}}`` or ``{"tool_calls": [one of those]}``;
- a reply with exactly one fenced bash block (mini-swe-agent's format), where
  ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` as the first output line submits.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
EDITOR_COMMANDS = ("view", "create", "str_replace", "insert")
TOOL_ALIASES = {
    "bash": "bash",
    "shell": "bash",
    "execute_bash": "bash",
    "editor": "editor",
    "str_replace_editor": "editor",
    "str_replace_based_edit_tool": "editor",
    "submit": "submit",
    "finish": "submit",
}
_BASH_BLOCK = re.compile(r"```(?:bash|sh|mswea_bash_command)\s*\n(.*?)\n?```", re.DOTALL)

FORMAT_HELP = f"""Reply with exactly one action, either
- a JSON tool call, one of:
  {{"tool": "bash", "command": "<shell command>"}}
  {{"tool": "editor", "command": "view", "path": "<path>", "view_range": [<first>, <last>]}}
  {{"tool": "editor", "command": "create", "path": "<path>", "file_text": "<content>"}}
  {{"tool": "editor", "command": "str_replace", "path": "<path>", "old_str": "<exact text>", "new_str": "<text>"}}
  {{"tool": "editor", "command": "insert", "path": "<path>", "insert_line": <n>, "new_str": "<text>"}}
  {{"tool": "submit"}}
- or a reply with exactly one ```bash code block; `echo {SUBMIT_MARKER}` submits.
Relative paths are relative to the repository root."""


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


TOOLS: list[dict[str, Any]] = [
    _function(
        "bash",
        "Run one shell command in the repository root; returns its output and exit code.",
        {"command": {"type": "string"}},
        ["command"],
    ),
    _function(
        "editor",
        "View, create or edit a file: command is view, create, str_replace or insert.",
        {
            "command": {"type": "string", "enum": list(EDITOR_COMMANDS)},
            "path": {"type": "string"},
            "view_range": {"type": "array", "items": {"type": "integer"}},
            "file_text": {"type": "string"},
            "old_str": {"type": "string"},
            "new_str": {"type": "string"},
            "insert_line": {"type": "integer"},
        },
        ["command", "path"],
    ),
    _function("submit", "Submit the current diff of the repository as the fix.", {}, []),
]
"""The tools in OpenAI function-calling form, for servers and chat templates that take ``tools``."""


class ActionError(ValueError):
    """The reply is not a valid action; the message says why and how to fix it."""


@dataclass(frozen=True)
class ToolCall:
    tool: str
    args: dict[str, Any] = field(default_factory=dict)

    def key(self) -> str:
        """Canonical form, to detect the same call repeated."""
        return json.dumps([self.tool, self.args], sort_keys=True, default=str)

    def to_json(self) -> str:
        return json.dumps({"tool": self.tool, **self.args})


def parse_action(text: str, max_chars: int = 200_000) -> ToolCall:
    """Parse one reply into a ToolCall, or raise ActionError saying what is wrong."""
    if not isinstance(text, str):
        raise ActionError(f"an action must be text, got {type(text).__name__}")
    if len(text) > max_chars:
        raise ActionError(f"the action is {len(text)} characters long; at most {max_chars} are accepted")
    if "\0" in text:
        raise ActionError("the action contains a NUL character")
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise ActionError(f"the reply looks like JSON but does not parse: {e}") from None
        return _from_json(data)
    blocks = _BASH_BLOCK.findall(text)
    if len(blocks) == 1:
        return ToolCall("bash", {"command": blocks[0]})
    if len(blocks) > 1:
        raise ActionError(f"found {len(blocks)} bash code blocks; reply with exactly one")
    raise ActionError("no action found in the reply")


def _from_json(data: Any) -> ToolCall:
    if isinstance(data, list):
        if len(data) != 1:
            raise ActionError(f"expected one tool call, got a list of {len(data)}")
        data = data[0]
    if not isinstance(data, dict):
        raise ActionError(f"a tool call must be a JSON object, got {type(data).__name__}")
    if "tool_calls" in data:
        calls = data["tool_calls"]
        if not isinstance(calls, list) or len(calls) != 1:
            raise ActionError("'tool_calls' must hold exactly one call")
        data = calls[0]
    if isinstance(data.get("function"), dict):
        data = data["function"]
    if "name" in data and "tool" not in data:
        args = data.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError as e:
                raise ActionError(f"the function arguments do not parse as JSON: {e}") from None
        if not isinstance(args, dict):
            raise ActionError("function 'arguments' must be a JSON object")
        data = {"tool": data["name"], **args}
    name = data.get("tool")
    if not isinstance(name, str) or name not in TOOL_ALIASES:
        raise ActionError(f"unknown tool {name!r}; the tools are bash, editor and submit")
    tool = TOOL_ALIASES[name]
    args = {k: v for k, v in data.items() if k != "tool"}
    if tool == "bash":
        if not isinstance(args.get("command"), str) or not args["command"].strip():
            raise ActionError("the bash tool needs a non-empty string 'command'")
        return ToolCall("bash", {"command": args["command"]})
    if tool == "editor":
        return ToolCall("editor", _editor_args(args))
    return ToolCall("submit", {})


def _editor_args(args: dict[str, Any]) -> dict[str, Any]:
    command = args.get("command")
    if command not in EDITOR_COMMANDS:
        raise ActionError(f"editor 'command' must be one of {', '.join(EDITOR_COMMANDS)}; got {command!r}")
    if not isinstance(args.get("path"), str) or not args["path"]:
        raise ActionError("the editor needs a string 'path'")
    required = {
        "create": {"file_text": str},
        "str_replace": {"old_str": str},
        "insert": {"insert_line": int, "new_str": str},
        "view": {},
    }[command]
    for key, kind in required.items():
        if not isinstance(args.get(key), kind) or isinstance(args.get(key), bool):
            raise ActionError(f"editor {command} needs {key!r} ({kind.__name__})")
    if "new_str" in args and not isinstance(args["new_str"], str):
        raise ActionError("'new_str' must be a string")
    vr = args.get("view_range")
    if vr is not None and (
        not isinstance(vr, list)
        or len(vr) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in vr)
    ):
        raise ActionError("'view_range' must be [first_line, last_line] (last_line -1 means the end)")
    keep = {"command", "path", "view_range", "file_text", "old_str", "new_str", "insert_line"}
    return {k: v for k, v in args.items() if k in keep and v is not None}


# ------------------------------------------------------------- constructors
def bash(command: str) -> str:
    return json.dumps({"tool": "bash", "command": command})


def view(path: str, view_range: tuple[int, int] | None = None) -> str:
    extra = {"view_range": list(view_range)} if view_range else {}
    return json.dumps({"tool": "editor", "command": "view", "path": path, **extra})


def create(path: str, file_text: str) -> str:
    return json.dumps({"tool": "editor", "command": "create", "path": path, "file_text": file_text})


def str_replace(path: str, old_str: str, new_str: str) -> str:
    return json.dumps(
        {"tool": "editor", "command": "str_replace", "path": path, "old_str": old_str, "new_str": new_str}
    )


def insert(path: str, insert_line: int, new_str: str) -> str:
    return json.dumps(
        {"tool": "editor", "command": "insert", "path": path, "insert_line": insert_line, "new_str": new_str}
    )


def submit() -> str:
    return json.dumps({"tool": "submit"})
