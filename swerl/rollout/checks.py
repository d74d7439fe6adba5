"""Warnings about a batch of episodes that point at the setup rather than the policy.

A model swapped in with the wrong settings (replies cut at ``max_new_tokens``, a chat
format the env does not parse) gets reward 0 on every episode, which looks like a
model that has not learned yet. Every episode of a batch with no valid action at all
is that case, and is said out loud.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from swerl.episode import Episode

INVALID_ACTION = "Invalid action:"
"""How SWEEnv starts the observation of a reply it could not parse as an action."""
log = logging.getLogger("swerl")


def has_valid_action(ep: Episode) -> bool:
    return any(not s.observation.startswith(INVALID_ACTION) for s in ep.steps)


def no_valid_action_warning(
    episodes: Iterable[Episode], max_new_tokens: int | None = None, lead: str | None = None
) -> str | None:
    """The warning for a batch in which no episode had a single valid action, else None."""
    eps = [e for e in episodes if e.steps and not e.infra_error]
    if not eps or any(has_valid_action(e) for e in eps):
        return None
    first = eps[0]
    cap = f"max_new_tokens={max_new_tokens}: a reply cut there is no action; " if max_new_tokens else ""
    lead = lead or f"none of the {len(eps)} episode(s) of this batch had a valid action"
    return (
        f"{lead} (e.g. {first.task_id}#"
        f"{first.attempt}, reply {first.steps[0].action[:80]!r}): the model's replies are neither a JSON tool "
        f"call nor one bash block. Check {cap}the action format and the system prompt "
        "(README: Training with your own model)"
    )


def warn_if_no_valid_action(
    episodes: Iterable[Episode], max_new_tokens: int | None = None, lead: str | None = None
) -> str | None:
    """Log the warning (logger ``swerl``) when it applies; returns it."""
    text = no_valid_action_warning(episodes, max_new_tokens, lead)
    if text:
        log.warning("swerl: warning: %s", text)
    return text


@dataclass
class NoActionStreak:
    """The same warning where a batch is never seen whole (verl runs one episode per call):
    ``after`` episodes in a row with no valid action stand for the batch."""

    after: int = 8
    run: int = 0

    def add(self, ep: Episode, max_new_tokens: int | None = None) -> str | None:
        """Count ``ep``; log and return the warning every ``after`` episodes of a streak."""
        if ep.infra_error or not ep.steps:
            return None
        if has_valid_action(ep):
            self.run = 0
            return None
        self.run += 1
        if self.after <= 0 or self.run % self.after:
            return None
        return warn_if_no_valid_action(
            [ep], max_new_tokens, f"{self.run} episodes in a row had no valid action"
        )


def tail(text: str, n: int = 300) -> str:
    """The last ``n`` characters of an error, starting at a word (not mid-word, as a plain slice does)."""
    text = text.strip()
    if len(text) <= n:
        return text
    cut = text[-n:]
    space = cut.find(" ")
    return "..." + (cut[space + 1 :] if 0 <= space < n // 2 else cut)
