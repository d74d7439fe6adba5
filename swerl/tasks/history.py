"""No answer in the sandbox: drop every git object the base commit does not reach.

SWE-bench images keep the repo's clone: tags, remote-tracking refs, the reflog
and packed objects of every later commit, the fix included (``git log --all``
or a pickaxe search finds it). :data:`SCRUB_SCRIPT` keeps what HEAD reaches and
nothing else. It is a bash + git script run through the sandbox, so it works on
every backend; a repo that is already clean (no other ref, no reflog, no object
HEAD does not reach) costs one ``rev-list`` and is left as it is, so images
prepared clean (the bundled ones) pay almost nothing at reset.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass

from swerl.errors import SandboxError
from swerl.sandbox.base import Sandbox

# $1: the repo. Prints "clean" or "scrubbed". Each step is cheap unless there is
# something to drop; the repack (which drops unreachable packed objects) only runs then.
SCRUB_SCRIPT = r"""
set -eu
cd "$1"
git rev-parse -q --verify HEAD >/dev/null
G=$(git rev-parse --git-dir)
keep=$(git symbolic-ref -q HEAD || echo HEAD)
extra=$(git for-each-ref --format='%(refname)' | grep -vxF "$keep" || true)
specials=$(cd "$G" && find logs -type f -size +0c 2>/dev/null; ls -d ORIG_HEAD FETCH_HEAD MERGE_HEAD CHERRY_PICK_HEAD REVERT_HEAD \
  BISECT_LOG rr-cache worktrees refs/original objects/info/alternates 2>/dev/null || true)
if [ -z "$extra" ] && [ -z "$specials" ]; then
  reachable=$(git rev-list --objects HEAD | wc -l)
  stored=$(git count-objects -v | awk '/^(count|in-pack):/ {n += $2} END {print n}')
  if [ "$reachable" -eq "$stored" ]; then echo clean; exit 0; fi
fi
printf '%s\n' "$extra" | sed -n 's/^./delete &/p' | git update-ref --stdin
git remote | while read -r r; do git remote remove "$r"; done
(cd "$G" && rm -rf logs ORIG_HEAD FETCH_HEAD MERGE_HEAD CHERRY_PICK_HEAD REVERT_HEAD BISECT_LOG \
  rr-cache worktrees refs/original objects/info/commit-graph objects/info/commit-graphs)
git repack -a -d -q
rm -f "$G/objects/info/alternates"
git prune --expire=now
echo scrubbed
"""


@dataclass(frozen=True)
class ScrubResult:
    scrubbed: bool
    """True when something was dropped; False when the repo was clean already."""
    seconds: float


def scrub_history(sandbox: Sandbox, repo: str = "/testbed", timeout: float = 600.0) -> ScrubResult:
    """Leave ``repo`` holding only what HEAD reaches (see :data:`SCRUB_SCRIPT`).

    Raises SandboxError when the script fails: a sandbox that may still hold the
    answer is not handed to an agent.
    """
    t = time.monotonic()
    r = sandbox.execute(
        f"bash -c {shlex.quote(SCRUB_SCRIPT)} scrub {shlex.quote(repo)}", cwd="/", timeout=timeout
    )
    if r.returncode != 0 or r.output.strip().splitlines()[-1:] not in (["clean"], ["scrubbed"]):
        raise SandboxError(f"cannot scrub the git history of {repo} (exit {r.returncode}): {r.output[-500:]}")
    return ScrubResult(r.output.strip().endswith("scrubbed"), time.monotonic() - t)
