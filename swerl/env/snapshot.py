"""Snapshots of an episode: small, serialisable, backend-neutral.

The workspace is stored against the task's base commit as three parts: the index
(what the agent staged, and anything it committed) as a binary git diff; every
working-tree file that differs from the index or is untracked outside .gitignore
(changed, new, renamed, mode-changed, binary, symlinks) as an uncompressed tar;
and the list of deleted paths. Only what changed is read (git's stat cache finds
it), so a snapshot costs milliseconds for a typical edit. Restoring applies them
to a fresh sandbox of the same image, on any backend and any actor. Not captured: running processes, files outside the repo,
ignored files, empty directories, timestamps, and commits the agent made (their
content is kept, flattened onto base_commit). ``full=True`` (Docker only) opts in
to a whole-container snapshot with ``docker commit`` instead.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from swerl.errors import ConfigError, InfraError, SandboxError
from swerl.sandbox.base import Sandbox

SNAPSHOT_VERSION = 1


class SnapshotError(ConfigError):
    """A snapshot that is corrupted or does not belong to this task or image."""


@dataclass
class Workspace:
    """The repo's state relative to base_commit."""

    index_diff: bytes = b""
    """``git diff --cached --binary base_commit``: the index (and commits) against base."""
    tree_tar: bytes = b""
    """Working-tree files that differ from the index, or are untracked and not ignored."""
    deleted: bytes = b""
    """NUL-separated paths in the index that the working tree deleted."""
    image: str = ""
    """Set only for a full-container snapshot: the committed image to restore from."""

    @property
    def size(self) -> int:
        return len(self.index_diff) + len(self.tree_tar) + len(self.deleted)


@dataclass
class EnvSnapshot:
    task: dict[str, Any]
    image: str
    base_commit: str
    state: dict[str, Any]
    limits: dict[str, Any]
    rng_state: dict[str, Any] | None
    workspace: Workspace = field(default_factory=Workspace)
    version: int = SNAPSHOT_VERSION

    @property
    def task_id(self) -> str:
        return self.task["instance_id"]

    @property
    def step(self) -> int:
        return int(self.state.get("steps", 0))

    # ----------------------------------------------------------- serialise
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        ws = self.workspace
        d["workspace"] = {
            "index_diff": base64.b64encode(ws.index_diff).decode(),
            "tree_tar": base64.b64encode(ws.tree_tar).decode(),
            "deleted": base64.b64encode(ws.deleted).decode(),
            "image": ws.image,
        }
        body = json.dumps(d, sort_keys=True, default=str)
        d["sha256"] = hashlib.sha256(body.encode()).hexdigest()
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, default=str)

    def to_bytes(self) -> bytes:
        return self.to_json().encode()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EnvSnapshot:
        if not isinstance(d, dict):
            raise SnapshotError(f"a snapshot is a JSON object, got {type(d).__name__}")
        d = dict(d)
        digest = d.pop("sha256", None)
        if digest != hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest():
            raise SnapshotError("snapshot checksum mismatch: the snapshot is corrupted or was edited")
        if d.get("version") != SNAPSHOT_VERSION:
            raise SnapshotError(
                f"snapshot version {d.get('version')!r} is not supported (expected {SNAPSHOT_VERSION})"
            )
        try:
            ws = d.pop("workspace")
            parts = (base64.b64decode(ws[k], validate=True) for k in ("index_diff", "tree_tar", "deleted"))
            workspace = Workspace(*parts, image=ws["image"])
            return cls(**d, workspace=workspace)
        except (KeyError, TypeError, ValueError) as e:
            raise SnapshotError(f"malformed snapshot: {e}") from None

    @classmethod
    def from_json(cls, text: str | bytes) -> EnvSnapshot:
        try:
            return cls.from_dict(json.loads(text))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise SnapshotError(f"a snapshot must be JSON: {e}") from None

    from_bytes = from_json


SNAP_DIR = "/tmp/.swerl-snapshot"
INLINE_MAX = 48 << 10
"""Parts up to this many bytes ride base64-encoded inside the apply command itself (one round
trip); a larger tar is written first. Keeps the command well under Linux's 128 KiB per argument."""
_PARTS = ("index", "deleted", "tree.tar")


def capture_workspace(sb: Sandbox, repo: str, base_commit: str) -> Workspace:
    """Read the workspace's difference from base_commit without changing it.

    One command: the three git reads run side by side, and when the three parts fit
    in the output cap they come back as its output, behind one header line with
    their sizes. A larger workspace is read as files instead (only the parts that
    are not empty), so nothing is sent twice and nothing is cut.
    """
    base, d = shlex.quote(base_commit), SNAP_DIR
    cap = max(int(sb.config.output_cap) - 128, 0)
    r = sb.execute(
        f"mkdir -p {d} || exit 1; "
        f"git diff --cached --binary --no-color {base} > {d}/index 2> {d}/index.err & i=$!; "
        f"git ls-files -z --deleted > {d}/deleted 2> {d}/deleted.err & x=$!; "
        f"git ls-files -z --modified --others --exclude-standard | "
        f"tar -cf {d}/tree.tar -b 1 --null --no-recursion --ignore-failed-read -T - 2>/dev/null; "
        f"wait $i && wait $x || {{ cat {d}/index.err {d}/deleted.err; exit 1; }}; "
        f"cd {d} && set -- $(stat -c %s {' '.join(_PARTS)}) && "
        f'if [ $(($1 + $2 + $3)) -le {cap} ]; then echo "SNAP $1 $2 $3"; cat {" ".join(_PARTS)}; '
        f'else echo "FILES $1 $2 $3"; fi',
        cwd=repo,
        timeout=300,
    )
    head, _, body = r.raw.partition(b"\n")
    fields = head.split()
    if r.returncode != 0 or len(fields) != 4 or fields[0] not in (b"SNAP", b"FILES"):
        raise InfraError(f"snapshot: cannot read the workspace: {r.output[-1000:]}")
    sizes = [int(n) for n in fields[1:]]
    if fields[0] == b"FILES":
        parts = [sb.read_file(f"{d}/{f}") if n else b"" for f, n in zip(_PARTS, sizes, strict=True)]
    else:
        ends = [sum(sizes[: k + 1]) for k in range(3)]
        parts = [body[e - n : e] for e, n in zip(ends, sizes, strict=True)]
        if r.truncated or len(body) != ends[-1]:
            raise InfraError(f"snapshot: the workspace came back cut ({len(body)} of {ends[-1]} bytes)")
    if [len(p) for p in parts] != sizes:
        raise InfraError(f"snapshot: read {[len(p) for p in parts]} bytes of parts sized {sizes}")
    index_diff, deleted, tree_tar = parts
    return Workspace(index_diff=index_diff, tree_tar=tree_tar, deleted=deleted)


def _inline(data: bytes, path: str) -> str:
    """A command that writes ``data`` to ``path`` from a here-document (no separate upload)."""
    return f"base64 -d > {path} <<'SWERL-B64'\n{base64.encodebytes(data).decode()}SWERL-B64\n"


def apply_workspace(sb: Sandbox, repo: str, base_commit: str, ws: Workspace, prelude: str = "") -> None:
    """Put a fresh checkout of base_commit into the captured state.

    One command, parts inlined; only a tar larger than :data:`INLINE_MAX` is uploaded
    first. ``prelude`` runs first in that same command (e.g. a fresh sandbox's history
    scrub), so a cold restore pays no extra round trip for it; a prelude that fails
    exits 4 with its output.
    """
    base, d = shlex.quote(base_commit), SNAP_DIR
    script = f"mkdir -p {d} || exit 1\n"
    if prelude:
        script += f"{{ {prelude}\n}} > {d}/prelude.out 2>&1 || {{ echo PRELUDE-FAILED; cat {d}/prelude.out; exit 4; }}\n"
    script += f'head=$(git rev-parse HEAD); [ "$head" = {base} ] || {{ echo "HEAD-MISMATCH $head"; exit 3; }}\nset -e\n'
    inlined = 0
    for data, name in ((ws.index_diff, "index.in"), (ws.deleted, "deleted.in"), (ws.tree_tar, "tree.in.tar")):
        if data and inlined + len(data) <= INLINE_MAX:
            script += _inline(data, f"{d}/{name}")
            inlined += len(data)
        elif data:
            sb.write_file(f"{d}/{name}", data)
    steps = []
    if ws.index_diff:
        steps += [
            f"git apply --cached --binary --whitespace=nowarn {d}/index.in",
            # the staged files' working copies follow the index; the tar below overrides
            f"git diff --cached --no-renames --name-only -z --diff-filter=d {base} | xargs -0 -r git checkout-index -f -q --",
            f"git diff --cached --no-renames --name-only -z --diff-filter=D {base} | xargs -0 -r rm -f --",
        ]
    if ws.tree_tar:
        steps.append(f"tar -xf {d}/tree.in.tar")
    if ws.deleted:
        steps.append(f"xargs -0 -r rm -f -- < {d}/deleted.in")
    r = sb.execute(script + "\n".join(steps), cwd=repo, timeout=300)
    if r.returncode == 3 and r.output.startswith("HEAD-MISMATCH"):
        head = r.output.split()[1]
        raise SnapshotError(
            f"the sandbox's repo is at {head[:12]}, but the snapshot is against {base_commit[:12]}"
        )
    if r.returncode == 4 and r.output.startswith("PRELUDE-FAILED"):
        raise SandboxError(f"cannot prepare the sandbox for the restore: {r.output[-1000:]}")
    if r.returncode != 0:
        raise InfraError(f"snapshot: cannot apply the workspace: {r.output[-1000:]}")
