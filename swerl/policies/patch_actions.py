"""Turn a unified diff into editor tool calls, so a scripted agent edits like a real one.

The gold policy uses this: it fixes the bug through the same editor an LLM uses
(``str_replace`` per hunk, ``create`` for new files), not by ``git apply``.
"""

from __future__ import annotations

import shlex

from unidiff import PatchSet

from swerl.env import actions


def patch_to_actions(patch: str) -> list[str]:
    """Editor (and, for deletions and renames, bash) actions that make ``patch``'s change."""
    out: list[str] = []
    for pf in PatchSet(patch):
        source = pf.source_file[2:] if pf.source_file.startswith("a/") else pf.source_file
        target = pf.target_file[2:] if pf.target_file.startswith("b/") else pf.target_file
        if pf.is_removed_file:
            out.append(actions.bash(f"rm -- {shlex.quote(source)}"))
            continue
        if pf.is_added_file:
            text = "".join(line.value for hunk in pf for line in hunk if line.is_added)
            out.append(actions.create(target, text))
            continue
        if pf.is_rename:
            out.append(actions.bash(f"git mv -- {shlex.quote(source)} {shlex.quote(target)}"))
        for hunk in pf:
            old = "".join(line.value for line in hunk if line.is_context or line.is_removed)
            new = "".join(line.value for line in hunk if line.is_context or line.is_added)
            if old != new:
                out.append(actions.str_replace(target, old, new))
    return out
