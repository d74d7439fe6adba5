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
shopt -s globstar nullglob dotglob
cd "$1"
# the git dir, HEAD's ref (HEAD when detached) and every ref's name: one process, and it fails
# when HEAD does not resolve
out=$(git rev-parse --git-dir --symbolic-full-name HEAD --all)
mapfile -t L <<<"$out"
G=${L[0]}
keep=${L[1]}
specials=
for p in "$G"/logs/**; do if [ -f "$p" ] && [ ! -L "$p" ] && [ -s "$p" ]; then specials=1; fi; done
for p in ORIG_HEAD FETCH_HEAD MERGE_HEAD CHERRY_PICK_HEAD REVERT_HEAD BISECT_LOG rr-cache worktrees \
  refs/original objects/info/alternates; do if [ -e "$G/$p" ] || [ -L "$G/$p" ]; then specials=1; fi; done
if { [ ${#L[@]} -eq 2 ] || { [ ${#L[@]} -eq 3 ] && [ "${L[2]}" = "$keep" ]; }; } && [ -z "$specials" ]; then
  exec {counted}< <(git count-objects -v)  # counts while rev-list walks (no count: not clean)
  reachable=$(git rev-list --count --objects HEAD)  # objects since git 2.26; commits before
  stored=0
  while read -r k v; do case $k in count: | in-pack:) stored=$((stored + v)) ;; esac; done <&"$counted"
  exec {counted}<&-
  if [ "$reachable" -ne "$stored" ]; then reachable=$(git rev-list --objects HEAD | wc -l); fi
  if [ "$reachable" -eq "$stored" ]; then echo clean; exit 0; fi
fi
extra=$(git for-each-ref --format='%(refname)' | grep -vxF "$keep" || true)
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
