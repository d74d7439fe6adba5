"""A text space for any Unicode string: observations are tool outputs, actions are LLM replies."""

from __future__ import annotations

from typing import Any

from gymnasium.spaces import Text


class AnyText(Text):
    """Like ``gymnasium.spaces.Text``, but any character is allowed.

    Text's ``contains`` checks each character against a finite charset, which
    cannot describe what a program prints; sampling still uses the default
    charset, which is all a sample needs.
    """

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AnyText({self.min_length}, {self.max_length})"
