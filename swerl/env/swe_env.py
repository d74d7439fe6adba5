"""SWEEnv: a Gymnasium environment whose state lives in a real sandbox.

Observation and action are text. ``reset`` hands out a fresh sandbox of the task
image (repo at base_commit) and returns the problem statement; ``step`` runs one
tool call. The episode terminates on submit and is graded in *another* fresh
sandbox, exactly as the official harness grades a prediction; it is truncated on
the step or wall-clock limit, or when the agent loops.

Rewards: 1.0 resolved, 0.0 unresolved / patch_failed / empty_patch, and NaN for
an infrastructure failure (never 0.0) with ``info["status"] == "infra_error"``.
Grading is ``strict`` by default (a policy must not learn the grader: see
swerl.grading.integrity), and every sandbox the agent gets holds no git history
past the base commit (``scrub_history=False`` keeps the image's history).
"""

from __future__ import annotations

import dataclasses
import math
import shlex
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import gymnasium as gym

from swerl.env.actions import FORMAT_HELP, SUBMIT_MARKER, ActionError, ToolCall, parse_action
from swerl.env.editor import Editor
from swerl.env.snapshot import EnvSnapshot, SnapshotError, Workspace, apply_workspace, capture_workspace
from swerl.env.spaces import AnyText
from swerl.errors import ConfigError, InfraError
from swerl.grading import GradeResult, GradeStatus, GradingMode, grade
from swerl.grading.harbor import grade_harbor, official_user_deviation
from swerl.sandbox import SandboxConfig, make_sandbox
from swerl.sandbox.base import Sandbox
from swerl.sandbox.interpreter import LOGIN_SHELL, check_interpreter, under_interpreter
from swerl.sandbox.pool import SandboxPool
from swerl.tasks.harbor_settings import sandbox_config as harbor_sandbox_config
from swerl.tasks.history import SCRUB_SCRIPT, scrub_history
from swerl.tasks.instance import Instance
from swerl.tasks.sources import load_tasks
from swerl.tasks.sources.harbor import BASE_AT_RESET

REPO_ROOT = "/testbed"
"""Where SWE-bench images keep the repository; a task's own ``workdir`` says where it is."""


@dataclass(frozen=True)
class Limits:
    """When an episode ends other than by submit. 0 disables a limit."""

    max_steps: int = 50
    max_seconds: float = 1800.0
    max_repeats: int = 3
    """The same call this many times in a row truncates the episode."""
    max_no_action: int = 5
    """This many consecutive replies without a valid action truncate the episode."""
    command_timeout: float = 60.0
    observation_chars: int = 10_000
    action_chars: int = 200_000
    grade_on_truncate: bool = True
    """Grade the current diff of a truncated episode, as many trainers do."""


@dataclass
class EpisodeState:
    """What an episode has used so far; snapshots carry it."""

    task_id: str = ""
    steps: int = 0
    elapsed: float = 0.0
    no_action: int = 0
    repeats: int = 0
    last_call: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)


def truncate_middle(text: str, limit: int) -> str:
    if limit <= 0 or len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters elided ...]\n{text[-tail:]}"


class SWEEnv(gym.Env[str, str]):
    metadata = {"render_modes": ["human", "ansi"]}

    def __init__(
        self,
        tasks: str | Instance | dict | list[Instance | dict] = "swerl-mini",
        backend: str = "docker",
        sandbox_config: SandboxConfig | None = None,
        limits: Limits | None = None,
        pool_size: int = 0,
        grade_pool_size: int = 0,
        grade_retries: int = 2,
        grade_timeout: float = 1800.0,
        grading: Literal["official", "strict"] = "strict",
        scrub_history: bool = True,
        render_mode: str | None = None,
        backend_options: dict[str, Any] | None = None,
        interpreter: tuple[str, ...] = LOGIN_SHELL,
        **limit_overrides: Any,
    ) -> None:
        self.tasks = _as_instances(tasks)
        if not self.tasks:
            raise ConfigError("SWEEnv needs at least one task")
        self._by_id = {t.instance_id: t for t in self.tasks}
        self._by_image = {t.image: t for t in self.tasks}
        self.backend = backend
        self.backend_options = dict(backend_options or {})
        """Keyword arguments of the backend's sandbox class (``backend.options`` in a config)."""
        self.sandbox_config = sandbox_config or SandboxConfig()
        self.interpreter = check_interpreter(interpreter)
        """What runs the agent's bash commands: a login shell reads the image's profile, where
        SWE-bench images activate the repo's environment; ``("bash", "-c")`` skips it."""
        try:
            self.limits = Limits(**{**asdict(limits or Limits()), **limit_overrides})
        except TypeError as e:
            raise ConfigError(f"unknown SWEEnv limit: {e}") from None
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ConfigError(
                f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}"
            )
        self.render_mode = render_mode
        self.grade_retries = grade_retries
        self.grade_timeout = grade_timeout
        self.grading = GradingMode.parse(grading)
        self.scrub_history = scrub_history
        """Drop git history past the base commit from every agent sandbox when it is made."""
        self.observation_space = AnyText(max_length=max(self.limits.observation_chars, 1) + 200_000)
        self.action_space = AnyText(max_length=self.limits.action_chars)
        prepare = self._prepare if scrub_history else None
        # at most 4 images' worth idle (the 4 warmed here), the least recently wanted closed first
        self.pool = (
            SandboxPool(self._new_sandbox, size=pool_size, prepare=prepare, max_idle=4 * pool_size)
            if pool_size
            else None
        )
        # grading sandboxes: fresh, never prepared or used, started while the episode runs
        self.grade_pool = (
            SandboxPool(self._grading_sandbox, size=grade_pool_size, max_idle=grade_pool_size)
            if grade_pool_size
            else None
        )
        self._deviations: dict[str, list[str]] = {}
        """Per Harbor task: the accepted deviations of its agent sandbox (recorded in the grade)."""
        self.task: Instance | None = None
        self.sandbox: Sandbox | None = None
        self.state = EpisodeState()
        self._t0 = 0.0
        self._last_obs = ""
        self._done = True
        self._closing: list[threading.Thread] = []
        if self.pool:
            for t in self.tasks[:4]:
                self.pool.prewarm(t.image)

    # ---------------------------------------------------------------- sandboxes
    def _new_sandbox(self, image: str, role: str = "agent") -> Sandbox:
        """A sandbox of ``image``; a Harbor task's settings for ``role`` applied ('' for none:
        grading applies the verifier's itself)."""
        task = self.task if self.task is not None and self.task.image == image else self._by_image.get(image)
        config = self.sandbox_config.replace(workdir=task.workdir if task else REPO_ROOT)
        if task is not None and task.graded_by_harbor and role:
            config, deviations = harbor_sandbox_config(task, config, self.backend, role)
            self._deviations[task.instance_id] = deviations
        return make_sandbox(self.backend, image, config, **self.backend_options)

    def _grading_sandbox(self, image: str) -> Sandbox:
        return self._new_sandbox(image, role="")

    def _prepare(self, sandbox: Sandbox) -> None:
        scrub_history(sandbox, sandbox.config.workdir)

    def _acquire(self, image: str) -> Sandbox:
        """A started agent sandbox; its history is scrubbed when it is made (in the pool,
        off reset's path), closed again if that fails."""
        if self.pool:
            return self.pool.acquire(image, refill=False)  # reset refills, for the next episode
        sandbox = self._new_sandbox(image).start()
        if self.scrub_history:
            try:
                self._prepare(sandbox)
            except BaseException:
                sandbox.close()
                raise
        return sandbox

    def _prewarm_grading(self, task: Instance) -> None:
        """Start the episode's grading sandbox now, so submit does not wait for a container.
        Not for a Harbor task: its verifier's settings are applied before the sandbox starts."""
        if self.grade_pool is not None and not task.graded_by_harbor:
            self.grade_pool.prewarm(task.image)

    def _grader(self, image: str) -> Sandbox:
        """A fresh sandbox for grading: a pre-started one from the grading pool when it has one
        (``grade`` calls its ``start``, which is then a no-op), else a new one."""
        if self.grade_pool is not None:
            return self.grade_pool.acquire(image, refill=False)
        return self._new_sandbox(image)

    def _release(self) -> None:
        """Hand the episode's sandbox to a background closer: removal stays off reset's path."""
        if self.sandbox is not None:
            closer = threading.Thread(target=self.sandbox.close, name="swerl-close", daemon=True)
            closer.start()
            self._closing = [t for t in self._closing if t.is_alive()] + [closer]
            self.sandbox = None

    # --------------------------------------------------------------- gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """Start an episode. ``options``: ``task`` (an id, Instance or dict; else a random one),
        ``snapshot`` (restore that instead), ``next_task`` (the task this env runs next: with a
        warm pool, its sandbox starts during this episode instead of another of this image)."""
        super().reset(seed=seed)
        options = options or {}
        if options.get("snapshot") is not None:
            return self.restore(options["snapshot"])
        self._release()
        self.task = self._choose_task(options.get("task"))
        nxt = self._choose_task(options["next_task"]) if options.get("next_task") is not None else None
        if self.task.graded_by_harbor and self.grading is GradingMode.OFFICIAL:
            official_user_deviation(self.task, self.backend)  # refused before the episode, not after it
        self._prewarm_grading(self.task)
        self.sandbox = self._acquire(self.task.image)
        if self.task.base_commit == BASE_AT_RESET:
            try:
                self.task = self._pin_base(self.task, self.sandbox)
            except BaseException:
                self._release()
                raise
        self.state = EpisodeState(task_id=self.task.instance_id)
        self._t0 = time.monotonic()
        self._done = False
        self._last_obs = self.task.problem_statement
        if self.pool:  # one start per episode: the next episode's image when known, else this one's
            self.pool.prewarm((nxt or self.task).image)
        return self._last_obs, self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.task is None or self.sandbox is None or self._done:
            raise gym.error.ResetNeeded("call reset() before step(), and again after an episode ends")
        t = time.monotonic()
        self.state.steps += 1
        record: dict[str, Any] = {"step": self.state.steps, "action": action}
        try:
            call = parse_action(action, self.limits.action_chars)
        except ActionError as e:
            call = None
            self.state.no_action += 1
            self.state.repeats = 0
            self.state.last_call = ""
            obs = f"Invalid action: {e}\n\n{FORMAT_HELP}"
        if call is not None:
            self.state.no_action = 0
            key = call.key()
            self.state.repeats = self.state.repeats + 1 if key == self.state.last_call else 1
            self.state.last_call = key
            try:
                obs, submitted = self._run(call)
            except InfraError as e:
                return self._finish_infra(record, e, t)
            if submitted:
                return self._finish(record, obs, t, terminated=True, reason="submitted")
        reason = self._truncation_reason()
        if reason:
            return self._finish(record, obs, t, terminated=False, reason=reason)
        obs = truncate_middle(obs, self.limits.observation_chars)
        self._record(record, obs, t)
        return obs, 0.0, False, False, self._info()

    def stop(self, reason: str) -> tuple[str, float, bool, bool, dict]:
        """End the episode where it is, without an action: a trainer's token budget ran out.

        Truncated like a step limit (the diff so far is graded when ``grade_on_truncate``),
        and nothing is added to the history: no action was taken.
        """
        if self.task is None or self.sandbox is None or self._done:
            raise gym.error.ResetNeeded("call reset() before stop(), and again after an episode ends")
        return self._finish(None, self._last_obs, time.monotonic(), terminated=False, reason=reason)

    # -------------------------------------------------------- snapshots
    def snapshot(self, full: bool = False) -> EnvSnapshot:
        """The episode so far as a small, backend-neutral record (see swerl.env.snapshot).

        ``full=True`` commits the whole container instead (Docker only): slower and
        larger, but it keeps files outside the repo too.
        """
        if self.task is None or self.sandbox is None or self._done:
            raise gym.error.ResetNeeded("snapshot() needs an episode in progress")
        if full:
            commit = getattr(self.sandbox, "commit", None)
            if commit is None:
                raise ConfigError(
                    f"full snapshots need a backend that can commit a container, not {self.backend}"
                )
            workspace = Workspace(image=commit())
        else:
            workspace = capture_workspace(self.sandbox, self.task.workdir, self.task.base_commit)
        state = asdict(self.state) | {"elapsed": time.monotonic() - self._t0}
        rng = self._np_random.bit_generator.state if self._np_random is not None else None
        return EnvSnapshot(
            task=self.task.to_dict(),
            image=self.task.image,
            base_commit=self.task.base_commit,
            state=state,
            limits=asdict(self.limits),
            rng_state=rng,
            workspace=workspace,
        )

    def restore(self, snapshot: EnvSnapshot | bytes | str | dict) -> tuple[str, dict]:
        """Put a fresh sandbox of the snapshot's image into its state; return (last observation, info)."""
        snap = _as_snapshot(snapshot)
        task = self._by_id.get(snap.task_id) or Instance.from_dict(snap.task, where="snapshot task")
        if task.base_commit == BASE_AT_RESET:  # pinned when the snapshotted episode started
            task = dataclasses.replace(task, base_commit=snap.base_commit)
        if task.image != snap.image or task.base_commit != snap.base_commit:
            raise SnapshotError(
                f"snapshot of task {snap.task_id} was taken on image {snap.image} at {snap.base_commit[:12]}, "
                f"but this env's task uses image {task.image} at {task.base_commit[:12]}"
            )
        sandbox = self._restore_sandbox(task, snap.workspace)
        self._prewarm_grading(task)
        self._release()  # only now: the old sandbox's removal stays off the restore's path
        self.task, self.sandbox = task, sandbox
        self.state = EpisodeState(**{k: v for k, v in snap.state.items() if k != "elapsed"})
        self._t0 = time.monotonic() - float(snap.state.get("elapsed", 0.0))
        if snap.rng_state is not None:
            self.np_random.bit_generator.state = snap.rng_state
        self._done = False
        history = self.state.history
        self._last_obs = history[-1]["observation"] if history else task.problem_statement
        return self._last_obs, self._info(restored_from_step=self.state.steps)

    def _restore_sandbox(self, task: Instance, workspace: Workspace) -> Sandbox:
        """A started sandbox in the snapshot's workspace state.

        A warm one from the pool when it has one ready; the pool refills after the apply,
        so no container start competes with it. Without a pool, a new one whose history
        scrub runs in the same command as the apply (one round trip after the start).
        The env's current episode is untouched if this fails.
        """
        if workspace.image:
            return self._new_sandbox(workspace.image).start()
        pool = self.pool
        sandbox = pool.acquire(task.image, refill=False) if pool else self._new_sandbox(task.image).start()
        scrub = self.scrub_history and not pool  # a pool's sandboxes are scrubbed when made
        prelude = f"bash -c {shlex.quote(SCRUB_SCRIPT)} scrub {shlex.quote(task.workdir)}" if scrub else ""
        try:
            apply_workspace(sandbox, task.workdir, task.base_commit, workspace, prelude=prelude)
        except BaseException:
            threading.Thread(target=sandbox.close, name="swerl-close", daemon=True).start()
            raise
        finally:
            if pool:
                pool.prewarm(task.image)  # refill once the apply is done
        return sandbox

    @staticmethod
    def _pin_base(task: Instance, sandbox: Sandbox) -> Instance:
        """The task with its base commit pinned to the sandbox's HEAD, before the agent acts
        (a Harbor task's starting state is a commit swerl made when it built the image)."""
        r = sandbox.execute("git rev-parse HEAD", cwd=task.workdir, timeout=60)
        if not r.ok:
            raise InfraError(f"{task.image}: {task.workdir} is not a git repository: {r.output[-300:]}")
        return dataclasses.replace(task, base_commit=r.output.strip())

    def wait_closed(self) -> None:
        """Wait until every sandbox this env handed off (at reset, restore, or the end of an
        episode) is removed: their removal runs in the background, off reset's path."""
        for closer in self._closing:
            closer.join()
        self._closing = []

    def close(self) -> None:
        self._release()
        self.wait_closed()
        for pool in (self.pool, self.grade_pool):
            if pool is not None:
                pool.close()
        super().close()

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_obs
        if self.render_mode == "human":
            print(self._last_obs)
        return None

    # ------------------------------------------------------------- internals
    def _choose_task(self, choice: Any) -> Instance:
        if choice is None:
            return self.tasks[int(self.np_random.integers(len(self.tasks)))]
        if isinstance(choice, Instance):
            return choice
        if isinstance(choice, dict):
            return Instance.from_dict(choice, where="reset(options={'task': ...})")
        if isinstance(choice, str):
            if choice not in self._by_id:
                raise ConfigError(f"unknown task {choice!r}; this env has {sorted(self._by_id)[:10]}...")
            return self._by_id[choice]
        raise ConfigError(
            f"options['task'] must be an id, an Instance or a dict, got {type(choice).__name__}"
        )

    def _run(self, call: ToolCall) -> tuple[str, bool]:
        """Run one tool call; return (observation, submitted)."""
        assert self.sandbox is not None and self.task is not None
        if call.tool == "submit":
            return "Submitted.", True
        if call.tool == "editor":
            return Editor(self.sandbox, self.task.workdir).run(call.args), False
        command = under_interpreter(call.args["command"], self.interpreter)
        r = self.sandbox.execute(command, cwd=self.task.workdir, timeout=self.limits.command_timeout)
        output = r.output
        if output.lstrip().startswith(SUBMIT_MARKER) and r.returncode == 0:
            return output, True
        if r.timed_out:
            output += (
                f"\n[swerl: the command timed out after {self.limits.command_timeout:g} s and was killed]"
            )
        elif r.output_limit:
            output += f"\n[swerl: the command wrote more than {self.sandbox.config.max_output} bytes of output and was killed]"
        elif r.returncode == 128 + 25:  # SIGXFSZ
            output += f"\n[swerl: a file grew past the sandbox's limit of {self.sandbox.config.max_file_size} bytes]"
        return f"<returncode>{r.returncode}</returncode>\n<output>\n{output}</output>", False

    def _truncation_reason(self) -> str:
        lim, st = self.limits, self.state
        if lim.max_no_action and st.no_action >= lim.max_no_action:
            return "no_action"
        if lim.max_repeats and st.repeats >= lim.max_repeats:
            return "repeated_action"
        if lim.max_steps and st.steps >= lim.max_steps:
            return "max_steps"
        max_seconds = lim.max_seconds
        agent_timeout = self.task.harbor.get("agent_timeout") if self.task is not None else None
        if agent_timeout:  # a Harbor task's [agent].timeout_sec
            max_seconds = min(max_seconds, agent_timeout) if max_seconds else agent_timeout
        if max_seconds and time.monotonic() - self._t0 >= max_seconds:
            return "time_limit"
        return ""

    def current_patch(self) -> str:
        """The workspace as a patch against base_commit (what would be submitted)."""
        assert self.sandbox is not None and self.task is not None
        r = self.sandbox.execute(
            f"git add -A && git diff --cached --binary {self.task.base_commit}",
            cwd=self.task.workdir,
            timeout=120,
        )
        if r.returncode != 0:
            raise InfraError(f"cannot compute the patch in the sandbox: {r.output[-500:]}")
        return r.output

    def grade_current(self) -> tuple[str, GradeResult]:
        assert self.task is not None
        patch = self.current_patch()
        if self.task.graded_by_harbor:
            result = grade_harbor(
                self.task,
                patch,
                sandbox=self.sandbox,
                sandbox_factory=self._grading_sandbox,
                mode=self.grading,
                retries=self.grade_retries,
            )
            agent = self._deviations.get(self.task.instance_id, [])
            result.deviations = sorted({*result.deviations, *agent})
            return patch, result
        result = grade(
            self.task,
            patch,
            sandbox_factory=self._grader,
            retries=self.grade_retries,
            timeout=self.grade_timeout,
            mode=self.grading,
        )
        result.deviations = sorted({*result.deviations, *self.task.extra.get("deviations", [])})
        return patch, result

    def _finish(self, record: dict | None, obs: str, t: float, terminated: bool, reason: str) -> tuple:
        self._done = True
        info_extra: dict[str, Any] = {"reason": reason}
        reward = 0.0
        if terminated or self.limits.grade_on_truncate:
            try:
                patch, result = self.grade_current()
            except InfraError as e:
                return self._finish_infra(record, e, t, reason)
            reward = math.nan if result.reward is None else float(result.reward)
            info_extra |= {
                "patch": patch,
                "status": result.status.value,
                "tests": result.tests,
                "grade": result.to_dict(),
                "integrity": result.integrity.to_dict() if result.integrity else None,
                "timings": result.timings,
            }
        obs = truncate_middle(obs, self.limits.observation_chars)
        if record is not None:
            self._record(record, obs, t)
        self._release()
        return obs, reward, terminated, not terminated, self._info(**info_extra)

    def _finish_infra(
        self, record: dict | None, error: InfraError, t: float, reason: str = "infra_error"
    ) -> tuple:
        self._done = True
        obs = f"[swerl: the sandbox failed: {error}]"
        if record is not None:
            self._record(record, obs, t)
        self._release()
        info = self._info(reason=reason, status=GradeStatus.INFRA_ERROR.value, error=str(error))
        return obs, math.nan, False, True, info

    def _record(self, record: dict, obs: str, t: float) -> None:
        self._last_obs = obs
        record |= {"observation": obs, "duration": time.monotonic() - t}
        self.state.history.append(record)
        self.state.elapsed = time.monotonic() - self._t0

    def _info(self, **extra: Any) -> dict[str, Any]:
        task = self.task
        return {
            "task_id": task.instance_id if task else None,
            "image": task.image if task else None,
            "step": self.state.steps,
            "backend": self.backend,
            **extra,
        }


def _as_snapshot(snapshot: Any) -> EnvSnapshot:
    if isinstance(snapshot, EnvSnapshot):
        return snapshot
    if isinstance(snapshot, (bytes, str)):
        return EnvSnapshot.from_json(snapshot)
    if isinstance(snapshot, dict):
        return EnvSnapshot.from_dict(snapshot)
    raise SnapshotError(f"not a snapshot: {type(snapshot).__name__}")


def _as_instances(tasks: Any) -> list[Instance]:
    if isinstance(tasks, Instance):
        return [tasks]
    if isinstance(tasks, dict):
        return [Instance.from_dict(tasks)]
    if isinstance(tasks, str):
        return load_tasks(tasks)
    if isinstance(tasks, (list, tuple)):
        return [
            t if isinstance(t, Instance) else Instance.from_dict(t, where=f"tasks[{i}]")
            for i, t in enumerate(tasks)
        ]
    raise ConfigError(
        f"tasks must be a suite name, a path, an Instance or a list of them, got {type(tasks).__name__}"
    )
