"""Problem statements from the failing tests' evidence: a template, or an OpenAI-compatible model.

The template says what fails and how (test names, the error each raised), never where
the bug is or what the fix is, as an issue written by a user would. A model (any
``/v1/chat/completions`` server) gets the same evidence plus the bug's diff and is
asked for an issue that does not reveal the fix; what it returns is checked for the
diff's changed lines and falls back to the template when it leaks them.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from typing import Any, Protocol

from swerl.errors import ConfigError


class Writer(Protocol):
    def write(self, inst: Any, cand: Any) -> str: ...


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

    def write(self, inst: Any, cand: Any) -> str:
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

    def write(self, inst: Any, cand: Any) -> str:
        evidence = "\n".join(f"- {t}: {e}" for t, e in _evidence(inst, cand))
        prompt = (
            "Write a short GitHub issue, as a user of the library would, about the bug that the "
            "following failing tests reveal. Describe the wrong behaviour; do not name the fix, the "
            f"changed line or the file.\n\nRepository: {inst.repo}\nFailing tests:\n{evidence}\n\n"
            f"The fix (for your understanding only, never quote it):\n{inst.patch[:3000]}"
        )
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": self.max_tokens,
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
            text = reply["choices"][0]["message"]["content"] or ""
        except (OSError, KeyError, ValueError) as e:
            raise ConfigError(f"problem-statement model at {self.base_url} failed: {e}") from e
        added = [
            ln[1:].strip()
            for ln in inst.patch.splitlines()
            if ln.startswith("+") and not ln.startswith("+++")
        ]
        if not text.strip() or any(a and len(a) > 8 and a in text for a in added):
            return TemplateWriter().write(inst, cand)  # empty, or it quotes the fix
        return text.strip() + "\n"
