"""Problem statements from the failing tests' evidence: a template, or an OpenAI-compatible model.

The template says what fails and how (test names, the error each raised), never where
the bug is or what the fix is, as an issue written by a user would. A model (any
``/v1/chat/completions`` server) gets the same evidence plus the bug's diff and is
asked for an issue that does not reveal the fix; what it returns is checked for the
diff's changed lines and falls back to the template when it leaks them.
"""

from __future__ import annotations

import json
import re
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from swerl.errors import ConfigError


@dataclass
class Statement:
    """A problem statement and how it was written (recorded in the task's ``synth.statement``)."""

    text: str
    mode: str
    """``template`` or ``model``."""
    model: str = ""
    fallback: str = ""
    """Why a model's statement was not used (unreachable, empty, quoted the fix); empty when it was."""

    def record(self) -> dict[str, str]:
        return {k: v for k, v in asdict(self).items() if k != "text" and v}


class Writer(Protocol):
    def write(self, inst: Any, cand: Any) -> Statement: ...


def _evidence(inst: Any, cand: Any, limit: int = 5) -> list[tuple[str, str]]:
    errors = getattr(cand, "errors", {}) or {}
    out = []
    for t in inst.FAIL_TO_PASS[:limit]:
        msg = (errors.get(t) or "").strip().splitlines()
        out.append((t, msg[0][:200] if msg else ""))
    return out


@dataclass
class TemplateWriter:
    """The default: deterministic, no network."""

    def write(self, inst: Any, cand: Any) -> Statement:
        return Statement(self.text(inst, cand), "template")

    def text(self, inst: Any, cand: Any) -> str:
        name = inst.repo.split("/")[-1]
        if getattr(cand, "message", "") and getattr(cand, "mutant", None) is None:
            head = cand.message.strip().splitlines()[0]
            intro = f"{head}\n\nIn {name}, the behaviour described above is missing or wrong."
        else:
            intro = f"A regression in {name}: behaviour its test suite checks no longer holds."
        lines = [intro, "", f"{len(inst.FAIL_TO_PASS)} test(s) fail, for example:"]
        for test, err in _evidence(inst, cand):
            lines.append(f"- `{test}`" + (f": {err}" if err else ""))
        if len(inst.FAIL_TO_PASS) > 5:
            lines.append(f"- ... and {len(inst.FAIL_TO_PASS) - 5} more")
        lines += [
            "",
            "Fix the library so these tests pass again without breaking the others. Do not edit the tests.",
        ]
        return "\n".join(lines) + "\n"


@dataclass
class ModelWriter:
    """An OpenAI-compatible chat model writes the issue (``base_url`` ends in ``/v1``)."""

    base_url: str
    model: str
    api_key: str = ""
    timeout: float = 120.0
    max_tokens: int = 400

    def check(self) -> None:
        """Refuse up front when the server does not answer (one request), not task by task."""
        self.complete("Reply with the word ready.", max_tokens=4)

    def complete(self, prompt: str, max_tokens: int | None = None) -> str:
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens or self.max_tokens,
        }
        req = urllib.request.Request(
            self.base_url.rstrip("/") + "/chat/completions",
            data=json.dumps(body).encode(),
            headers={
                "Content-Type": "application/json",
                **({"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}),
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                reply = json.loads(r.read())
            return reply["choices"][0]["message"]["content"] or ""
        except (OSError, KeyError, IndexError, TypeError, ValueError) as e:
            raise ConfigError(f"problem-statement model at {self.base_url} failed: {e}") from e

    def write(self, inst: Any, cand: Any) -> Statement:
        """The model's issue; the template (with the reason recorded) when the call fails, or the reply is empty or quotes the fix."""
        evidence = "\n".join(f"- {t}: {e}" for t, e in _evidence(inst, cand))
        prompt = (
            "Write a short GitHub issue, as a user of the library would, about the bug that the "
            "following failing tests reveal. Describe the wrong behaviour; do not name the fix, the "
            f"changed line or the file.\n\nRepository: {inst.repo}\nFailing tests:\n{evidence}\n\n"
            f"The fix (for your understanding only, never quote it):\n{inst.patch[:3000]}"
        )
        template = TemplateWriter().text(inst, cand)
        try:
            text = self.complete(prompt)
        except ConfigError as e:
            return Statement(template, "template", self.model, f"model failed: {e}"[:300])
        text = re.sub(r"<think>.*?(</think>|$)", "", text, flags=re.S).strip()  # reasoning models
        added = [
            ln[1:].strip()
            for ln in inst.patch.splitlines()
            if ln.startswith("+") and not ln.startswith("+++")
        ]
        if not text:
            return Statement(template, "template", self.model, "model reply empty")
        if any(a and len(a) > 8 and a in text for a in added):
            return Statement(template, "template", self.model, "model reply quoted the fix")
        return Statement(text + "\n", "model", self.model)
