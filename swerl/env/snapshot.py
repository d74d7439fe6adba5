"""Snapshots of an episode: small, serialisable, backend-neutral.

The workspace is stored as two binary git diffs against the task's base commit:
the index (what the agent staged) and the working tree (tracked changes, new,
deleted and renamed files, modes, binary files, untracked files outside
.gitignore). Restoring applies both to a fresh sandbox of the same image, on any
backend and any actor. Not captured: running processes, files outside the repo,
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

from swerl.errors import ConfigError, InfraError
from swerl.sandbox.base import Sandbox

SNAPSHOT_VERSION = 1
TMP_INDEX = "/tmp/.swerl-snapshot-index"


class SnapshotError(ConfigError):
    """A snapshot that is corrupted or does not belong to this task or image."""


@dataclass
class Workspace:
    """The repo's state relative to base_commit, as binary git diffs."""

    index_diff: bytes = b""
    tree_diff: bytes = b""
    image: str = ""
    """Set only for a full-container snapshot: the committed image to restore from."""

    @property
    def size(self) -> int:
        return len(self.index_diff) + len(self.tree_diff)


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
            "tree_diff": base64.b64encode(ws.tree_diff).decode(),
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
            workspace = Workspace(
                base64.b64decode(ws["index_diff"]), base64.b64decode(ws["tree_diff"]), ws["image"]
            )
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


def _run(sb: Sandbox, command: str, repo: str, what: str) -> bytes:
    r = sb.execute(command, cwd=repo, timeout=300)
    if r.returncode != 0 or r.truncated:
        raise InfraError(f"snapshot: cannot {what}: {r.output[-1000:]}")
    return r.raw


def capture_workspace(sb: Sandbox, repo: str, base_commit: str) -> Workspace:
    """Diff the index and the whole working tree against base_commit, touching neither."""
    base = shlex.quote(base_commit)
    index_diff = _run(sb, f"git diff --cached --binary --no-color {base}", repo, "diff the index")
    tree_diff = _run(
        sb,
        f"export GIT_INDEX_FILE={TMP_INDEX}; git read-tree {base} && git add -A && "
        f"git diff --cached --binary --no-color {base}; rc=$?; rm -f {TMP_INDEX}; exit $rc",
        repo,
        "diff the working tree",
    )
    return Workspace(index_diff, tree_diff)


def apply_workspace(sb: Sandbox, repo: str, base_commit: str, ws: Workspace) -> None:
    """Put a fresh checkout of base_commit into the captured state."""
    head = _run(sb, "git rev-parse HEAD", repo, "read HEAD").decode().strip()
    if head != base_commit:
        raise SnapshotError(
            f"the sandbox's repo is at {head[:12]}, but the snapshot is against {base_commit[:12]}"
        )
    for name, diff, flags in (("index", ws.index_diff, "--cached"), ("tree", ws.tree_diff, "")):
        if not diff:
            continue
        path = f"/tmp/.swerl-snapshot-{name}.diff"
        sb.write_file(path, diff)
        _run(
            sb,
            f"git apply --binary --whitespace=nowarn {flags} {path} && rm -f {path}",
            repo,
            f"apply the {name}",
        )
