"""Snapshot and restore: same next observation, same grade, on another env, actor or image check."""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor

import pytest
import ray

from swerl.env import SWEEnv, actions
from swerl.env.snapshot import INLINE_MAX, EnvSnapshot, SnapshotError, Workspace, apply_workspace
from swerl.episode import Episode, Step
from swerl.errors import InfraError, SandboxError
from swerl.policies.patch_actions import patch_to_actions
from swerl.rollout.branch import branch
from swerl.rollout.replay import replay
from swerl.sandbox.base import SandboxConfig

PROBE = actions.bash("git status --porcelain; git diff; git diff --cached; ls -R")


@pytest.fixture
def env_pair(tasks, run_id):
    cfg = SandboxConfig(run_id=run_id)
    a, b = SWEEnv(tasks, sandbox_config=cfg), SWEEnv(tasks, sandbox_config=cfg)
    yield a, b
    a.close()
    b.close()


def _roundtrip(task, run_id):
    cfg = SandboxConfig(run_id=run_id)
    with SWEEnv([task], sandbox_config=cfg) as a, SWEEnv([task], sandbox_config=cfg) as b:
        a.reset(options={"task": task.instance_id})
        gold = patch_to_actions(task.patch)
        half = max(1, len(gold) // 2)
        for act in [
            *gold[:half],
            actions.bash("echo scratch > NOTES.tmp && mkdir -p new/dir && echo x > new/dir/f"),
        ]:
            a.step(act)
        snap = EnvSnapshot.from_bytes(a.snapshot().to_bytes())
        obs_b, info = b.reset(options={"snapshot": snap})
        assert info["restored_from_step"] == half + 1 and obs_b == a.state.history[-1]["observation"]
        assert b.step(PROBE)[0] == a.step(PROBE)[0]
        finals = []
        for env in (a, b):
            for act in [*gold[half:], actions.bash("rm -rf NOTES.tmp new"), actions.submit()]:
                out = env.step(act)
            finals.append((out[1], out[4]["status"], out[4]["patch"]))
        return finals


def test_every_task_restores_to_the_same_observation_and_grade(tasks, run_id):
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda t: _roundtrip(t, run_id), tasks))
    for task, (orig, restored) in zip(tasks, results, strict=True):
        assert orig == restored, task.instance_id
        assert orig[:2] == (1.0, "resolved"), task.instance_id


def test_binary_deletions_renames_modes_untracked_and_staged_survive(env_pair, tasks):
    a, b = env_pair
    a.reset(options={"task": tasks[0].instance_id})
    a.sandbox.write_file("/testbed/blob.bin", bytes(range(256)) * 40 + b"\x00\xff")
    files = a.step(actions.bash("git ls-files"))[0].split("<output>\n")[1].split()
    victim, moved, modded = files[0], files[1], files[2]
    script = (
        f"git rm -q {victim} && git mv {moved} {moved}.renamed && chmod +x {modded} && "
        "mkdir -p untracked/deep && printf 'u\\n' > untracked/deep/file.txt && "
        "echo staged > staged.txt && git add staged.txt && echo 'not staged' >> staged.txt && "
        "ln -s staged.txt link.txt"
    )
    assert "<returncode>0</returncode>" in a.step(actions.bash(script))[0]
    snap = a.snapshot()
    assert snap.workspace.size < 50_000
    b.restore(snap.to_bytes())
    probe = actions.bash(
        "git status --porcelain; git diff --cached --stat; find . -path ./.git -prune -o -type f -print0 | sort -z "
        "| xargs -0 sha256sum; stat -c '%a %n' * | sort; readlink link.txt"
    )
    expected, actual = a.step(probe)[0], b.step(probe)[0]
    assert expected == actual
    assert "blob.bin" in actual and "renamed" in actual and "staged.txt" in actual and "755" in actual


def test_a_tree_larger_than_the_output_cap_is_read_as_a_file(tasks, run_id):
    """The tar normally rides on the capture command's output; past the cap it must not be cut."""
    task, blob = tasks[0], bytes(range(256)) * 200  # 51 KB, NUL bytes included
    with (
        SWEEnv([task], sandbox_config=SandboxConfig(run_id=run_id, output_cap=4096)) as a,
        SWEEnv([task], sandbox_config=SandboxConfig(run_id=run_id)) as b,
    ):
        a.reset(options={"task": task.instance_id})
        a.sandbox.write_file("/testbed/blob.bin", blob)
        staged_and_deleted = (
            "echo staged > staged.txt && git add staged.txt && "
            "git rm -q $(git ls-files | sed -n 1p) && rm $(git ls-files | sed -n 2p)"
        )
        a.step(actions.bash(staged_and_deleted))
        snap = a.snapshot()
        ws = snap.workspace
        assert len(ws.tree_tar) > len(blob) and ws.index_diff and ws.deleted
        b.restore(snap)
        probe = "git status --porcelain; sha256sum blob.bin staged.txt"
        assert b.sandbox.execute(probe).output == a.sandbox.execute(probe).output
        assert b.sandbox.read_file("/testbed/blob.bin") == blob


def test_a_snapshot_branches_on_other_actors(tasks, run_id):
    task = tasks[0]
    gold = patch_to_actions(task.patch)
    with SWEEnv([task], sandbox_config=SandboxConfig(run_id=run_id)) as env:
        env.reset(options={"task": task.instance_id})
        env.step(actions.bash("echo probe > PROBE.txt"))
        snap = env.snapshot()
    ray.init(num_cpus=4, include_dashboard=False, ignore_reinit_error=True)
    try:
        eps = branch(
            snap, [[*gold, actions.bash("rm PROBE.txt")], [actions.bash("rm PROBE.txt")]], num_actors=2
        )
    finally:
        ray.shutdown()
    assert [e.attempt for e in eps] == [0, 1]
    assert eps[0].status == "resolved" and eps[0].reward == 1.0
    assert eps[1].status in ("empty_patch", "unresolved") and eps[1].reward == 0.0
    assert all(e.where["branched_from_step"] == 1 for e in eps)
    assert eps[0].steps[0].index == snap.step + 1  # steps are numbered on from the branch point
    report = replay(eps[0], tasks=[task], snapshot=snap, sandbox_config=SandboxConfig(run_id=run_id))
    assert report.matches and report.compared == len(eps[0].steps)


def test_corrupted_and_mismatched_snapshots_are_rejected(env_pair, tasks):
    a, b = env_pair
    a.reset(options={"task": tasks[0].instance_id})
    a.step(actions.bash("echo hi > x.txt"))
    snap = a.snapshot()
    data = json.loads(snap.to_json())
    data["state"]["steps"] = 99
    with pytest.raises(SnapshotError, match="checksum"):
        b.restore(json.dumps(data))
    with pytest.raises(SnapshotError, match="must be JSON"):
        b.restore(b"\x00garbage")
    other = tasks[-1]
    snap.image = other.image
    with pytest.raises(SnapshotError, match="taken on image"):
        b.restore(snap)
    wrong_base = EnvSnapshot.from_json(a.snapshot().to_json())
    wrong_base.task = {**wrong_base.task, "instance_id": "not-in-this-env", "base_commit": "0" * 40}
    wrong_base.base_commit = "0" * 40
    with pytest.raises(SnapshotError, match="snapshot is against"):
        b.restore(wrong_base)


def test_full_container_snapshot_keeps_files_outside_the_repo(env_pair, tasks, docker_client):
    a, b = env_pair
    a.reset(options={"task": tasks[0].instance_id})
    a.step(actions.bash("echo outside > /root/outside.txt && echo inside > in.txt"))
    snap = a.snapshot(full=True)
    try:
        b.restore(snap)
        obs = b.step(actions.bash("cat /root/outside.txt in.txt"))[0]
        assert "outside\ninside" in obs
    finally:
        b.close()
        docker_client.images.remove(snap.workspace.image, force=True)


def test_replay_matches_and_reports_the_first_divergence(tasks, run_id):
    task = tasks[1]
    cfg = SandboxConfig(run_id=run_id)
    with SWEEnv([task], sandbox_config=cfg) as env:
        env.reset(options={"task": task.instance_id})
        acts = [actions.bash("ls"), *patch_to_actions(task.patch), actions.submit()]
        for act in acts:
            out = env.step(act)
        history = env.state.history
    ep = Episode(
        task.instance_id, 0, [Step(h["step"], h["action"], h["observation"]) for h in history], reward=out[1]
    )
    report = replay(ep, tasks=[task], sandbox_config=cfg)
    assert report.matches and report.compared == len(acts) and report.reward == 1.0
    ep.steps[1].observation = "something else"
    report = replay(ep, tasks=[task], sandbox_config=cfg)
    assert report.first_divergence is not None and report.first_divergence.step == 2


def test_parts_past_the_inline_limit_restore_warm_and_cold(tasks, run_id):
    """A staged binary past the inline limit is uploaded, the rest rides in the command; a pooled
    (warm) and a pool-less (cold, scrubbed in the same command) restore give the same tree."""
    task = tasks[0]
    cfg = SandboxConfig(run_id=run_id)
    big = random.Random(0).randbytes(INLINE_MAX + 10_000)  # incompressible, so its diff is past the limit
    with (
        SWEEnv([task], sandbox_config=cfg) as a,
        SWEEnv([task], sandbox_config=cfg) as cold,
        SWEEnv([task], sandbox_config=cfg, pool_size=1) as warm,
    ):
        a.reset(options={"task": task.instance_id})
        a.sandbox.write_file("/testbed/staged.bin", big)
        a.sandbox.write_file("/testbed/untracked.bin", b"\x00\x01 untracked\xff")
        script = "git add staged.bin && rm $(git ls-files '*.py' | sed -n 1p)"
        assert "<returncode>0</returncode>" in a.step(actions.bash(script))[0]
        snap = a.snapshot()
        ws = snap.workspace
        assert len(ws.index_diff) > INLINE_MAX and 0 < len(ws.tree_tar) < INLINE_MAX and ws.deleted
        probe = (
            "git status --porcelain; git diff --cached --stat; find . -path ./.git -prune -o -type f -print0 "
            "| sort -z | xargs -0 sha256sum; stat -c '%a %n' * | sort"
        )
        expected = a.sandbox.execute(probe).output
        for env in (warm, cold):
            obs, info = env.restore(snap)
            assert info["restored_from_step"] == 1 and obs == a.state.history[-1]["observation"]
            assert env.sandbox.execute(probe).output == expected
            assert env.sandbox.read_file("/testbed/staged.bin") == big
        scrub = cold.sandbox.read_file("/tmp/.swerl-snapshot/prelude.out").decode().split()
        assert scrub[-1:] in (["clean"], ["scrubbed"])  # the cold restore scrubbed its fresh sandbox


def test_a_failed_restore_leaves_the_current_episode_as_it_was(env_pair, tasks):
    a, b = env_pair
    a.reset(options={"task": tasks[0].instance_id})
    a.step(actions.bash("echo kept > kept.txt"))
    bad = a.snapshot()
    bad.workspace.index_diff = b"this is not a patch\n"
    before, steps = a.sandbox, a.state.steps
    with pytest.raises(InfraError, match="cannot apply the workspace"):
        a.restore(bad)
    assert a.sandbox is before and a.state.steps == steps
    assert "kept" in a.step(actions.bash("cat kept.txt"))[0]


def test_a_failing_prelude_is_a_sandbox_error_and_nothing_is_applied(env_pair, tasks):
    a, _ = env_pair
    a.reset(options={"task": tasks[0].instance_id})
    ws = Workspace(deleted=a.sandbox.execute("git ls-files -z | head -z -n 1", cwd="/testbed").raw)
    with pytest.raises(SandboxError, match="prepare the sandbox"):
        apply_workspace(a.sandbox, "/testbed", tasks[0].base_commit, ws, prelude="echo no; false")
    assert a.sandbox.execute("git status --porcelain", cwd="/testbed").output == ""


def test_the_replaced_sandbox_is_removed_in_the_background_and_waited_for(env_pair, tasks, docker_client):
    a, b = env_pair
    a.reset(options={"task": tasks[0].instance_id})
    b.reset(options={"task": tasks[0].instance_id})
    replaced = b.sandbox.container_id
    b.restore(a.snapshot())
    assert b.sandbox.container_id != replaced
    b.wait_closed()
    assert not docker_client.api.containers(all=True, filters={"id": replaced})
    assert b.step(actions.bash("echo still here"))[0].endswith("still here\n</output>")
