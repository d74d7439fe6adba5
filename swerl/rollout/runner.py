"""RolloutRunner: schedules episodes on Ray actors and streams them as they finish.

    runner = RolloutRunner(tasks, GoldPolicy(), num_actors=4, envs_per_actor=2)
    for episode in runner.stream():          # completion order
        trainer.update(episode)

Bounded in-flight work (the generator schedules only as fast as it is consumed),
groups of attempts per task for GRPO, infra errors retried on another actor,
dead actors replaced (their containers reaped) with only their in-flight
episodes redone, and a durable JSONL sink that a rerun resumes from.

Off-policy bounds: the trainer reports each new policy version
(``set_policy_version``); every episode records the version that sampled it and
its ``age`` (versions behind when handed out). With ``max_staleness``, an
episode older than that is dropped or re-run (``stale="drop"|"rerun"``), counted
in ``stats``. A re-run that comes back stale again is handed out anyway, its age
on record, so a slow task is never starved.

Warm sandboxes (``env_kwargs={"pool_size": 1}``): each slot that starts an episode while
more work waits reserves its next item and its env starts that item's sandbox during the
current episode (``next_task`` at reset), so the next reset takes a started sandbox. A
free slot with nothing to do takes another slot's reservation rather than idle.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ray
import ray.exceptions

from swerl.cluster.ray_init import ensure_ray
from swerl.episode import Episode, JsonlSink
from swerl.errors import ConfigError, InfraError
from swerl.policies.base import Decision, Policy, act_batch
from swerl.rollout.actor import EnvActor
from swerl.rollout.nodes import NodeFailure, avoiding, died_on, node_info, raylet_dead
from swerl.sandbox import reap
from swerl.sandbox.base import default_run_id
from swerl.tasks.instance import Instance
from swerl.tasks.sources import load_tasks

log = logging.getLogger(__name__)


@dataclass
class Work:
    task_id: str
    attempt: int
    retries: int = 0
    avoid: str | None = None
    not_before: float = 0.0
    """monotonic time before which a retry is not started (exponential backoff)."""
    version: int = 0
    """The policy version when it was (last) launched."""
    born: float = 0.0
    """monotonic time of its first launch, kept across retries and re-runs."""
    stale_reruns: int = 0


@dataclass(eq=False)
class ActorSlot:
    actor_id: str
    handle: Any
    index: int


@dataclass(eq=False)
class Running:
    work: Work
    slot: ActorSlot
    kind: str = "episode"
    state: Any = None
    pending: list[Decision] = field(default_factory=list)


class RolloutRunner:
    def __init__(
        self,
        tasks: str | list[Instance],
        policy: Policy,
        *,
        num_actors: int = 2,
        envs_per_actor: int = 1,
        attempts: int = 1,
        max_in_flight: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        actor_cpus: float = 0.25,
        max_retries: int = 2,
        retry_delay: float = 1.0,
        sink: str | os.PathLike | None = None,
        resume: bool = True,
        group: bool = False,
        run_id: str | None = None,
        ray_address: str | None = None,
        backend: str = "docker",
        snapshot: Any = None,
        max_staleness: int | None = None,
        stale: str = "rerun",
        placement: str = "pack",
    ) -> None:
        if stale not in ("drop", "rerun"):
            raise ConfigError(f"stale must be 'drop' or 'rerun', got {stale!r}")
        if max_staleness is not None and max_staleness < 0:
            raise ConfigError(f"max_staleness must be at least 0, got {max_staleness}")
        if max_staleness is not None and stale == "drop" and group:
            raise ConfigError("stale='drop' would leave groups incomplete; use stale='rerun' with group=True")
        self.tasks = load_tasks(tasks) if isinstance(tasks, (str, Path)) else list(tasks)
        if not self.tasks:
            raise ConfigError("RolloutRunner needs at least one task")
        if policy.placement not in ("actor", "driver"):
            raise ConfigError(f"policy placement must be 'actor' or 'driver', got {policy.placement!r}")
        if placement not in ("pack", "spread"):
            raise ConfigError(
                f"actor placement must be 'pack' or 'spread' (over the nodes), got {placement!r}"
            )
        if num_actors < 1 or envs_per_actor < 1 or attempts < 1:
            raise ConfigError("num_actors, envs_per_actor and attempts must be at least 1")
        self.by_id = {t.instance_id: t for t in self.tasks}
        self.policy = policy
        self.num_actors = num_actors
        self.envs_per_actor = envs_per_actor
        self.attempts = attempts
        self.max_in_flight = max_in_flight or num_actors * envs_per_actor
        self.env_kwargs = {"backend": backend, **(env_kwargs or {})}
        self.backend = self.env_kwargs["backend"]
        self.actor_cpus = actor_cpus
        self.max_retries = max_retries
        self.retry_delay = retry_delay
        self.sink_path = Path(sink) if sink else None
        self.resume = resume
        self.group = group
        self.run_id = run_id or default_run_id()
        self.ray_address = ray_address
        self._actors: dict[str, Any] = {}
        self._free: deque[ActorSlot] = deque()
        self._inflight: dict[Any, list[Running]] = {}
        """ref -> the episodes its call serves: one, or (a ``step_many``) all of an actor's pending steps."""
        self._spawned = 0
        self._policy_ref: Any = None
        self.snapshot = snapshot
        """Every episode starts from this EnvSnapshot instead of a clean reset (branching)."""
        self._snapshot_ref: Any = None
        self.stats: dict[str, int] = defaultdict(int)
        self.policy_version = 0
        self.max_staleness = max_staleness
        self.stale = stale
        self._work_of: dict[tuple[str, int], Work] = {}
        self.placement = placement
        self.node_failures: list[NodeFailure] = []
        self._actor_where: dict[str, Any] = {}
        """actor id -> ref of its ``where()`` (its node), asked when it starts."""
        self.reserve_next = bool(self.env_kwargs.get("pool_size")) and snapshot is None
        """Reserve each slot's next item so its env warms that sandbox (with a warm pool; a branch
        run restores every episode from the one image, which the pool refills anyway)."""
        self._reserved: dict[ActorSlot, Work] = {}
        self._dead: list[str] = []
        """Ids of actors that died this run: reaped again at close."""
        """slot -> the item it runs next, its sandbox warming in that slot's env."""

    def set_policy_version(self, version: int, weights: Any = None) -> None:
        """The trainer updated the policy: episodes launched from now on carry ``version``.

        A policy with a ``policy_version`` attribute gets it too (an actor-placed
        one is shipped to the actors again, for the episodes launched next).
        ``weights`` (a model or checkpoint directory) first go to the policy's server
        (``policy.push_weights``, e.g. ``LLMPolicy`` on vLLM), before any new episode starts.
        """
        if weights is not None:
            push = getattr(self.policy, "push_weights", None)
            if push is None:
                raise ConfigError(f"{type(self.policy).__name__} cannot take new weights (no push_weights)")
            push(weights, version)
        self.policy_version = version
        if hasattr(self.policy, "policy_version"):
            self.policy.policy_version = version
            if self._policy_ref is not None:
                self._policy_ref = ray.put(self.policy)

    # ------------------------------------------------------------ actors
    def _spawn_actor(self) -> str:
        self._spawned += 1
        if self._spawned > self.num_actors * 4:
            died = "".join(f"; node {f.node} ({f.node_id}) died" for f in self.node_failures)
            raise InfraError(f"gave up: {self._spawned - 1} actors were started and too many died{died}")
        actor_id = f"{self.run_id}-a{self._spawned}"
        options: dict[str, Any] = {"num_cpus": self.actor_cpus, "max_concurrency": self.envs_per_actor + 4}
        if self.placement == "spread":
            options["scheduling_strategy"] = "SPREAD"
        options |= avoiding({f.node_id for f in self.node_failures})
        handle = EnvActor.options(**options).remote(
            self._tasks_ref, self.envs_per_actor, actor_id, self.env_kwargs
        )
        self._actors[actor_id] = handle
        self._actor_where[actor_id] = handle.where.remote()
        self._free.extend(ActorSlot(actor_id, handle, i) for i in range(self.envs_per_actor))
        return actor_id

    def start(self) -> RolloutRunner:
        if self._actors:
            return self
        ensure_ray(self.ray_address)
        self._tasks_ref = ray.put(self.tasks)
        if self.policy.placement == "actor":
            self._policy_ref = ray.put(self.policy)
        if self.snapshot is not None:
            self._snapshot_ref = ray.put(self.snapshot)
        for _ in range(self.num_actors):
            self._spawn_actor()
        self._first_contact()
        return self

    def _first_contact(self) -> None:
        """Wait until every actor answers. Ray places actors on a node that died until the GCS
        marks it dead (~15 s): one that dies with its node before it ever ran is started again
        on a live node (bounded, as every replacement is) and counted in ``node_failures``. Any
        other death (its ``__init__`` raised, a node that is alive) is raised at once."""
        pending = {h.ping.remote(): actor_id for actor_id, h in self._actors.items()}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            actor_id = pending.pop(ready[0])
            try:
                ray.get(ready[0])
            except ray.exceptions.RayActorError as e:
                node = None if e.actor_init_failed else self._dead_node(actor_id, e)
                if node is None:
                    raise
                self._node_died(node, retried=0, replaced=1)
                with contextlib.suppress(Exception):  # unreachable, maybe not yet dead: end it for good
                    ray.kill(self._actors[actor_id], no_restart=True)
                new = self._actor_died(actor_id, e)
                pending[self._actors[new].ping.remote()] = new

    def _actor_died(self, actor_id: str, why: BaseException) -> str | None:
        """Forget the dead actor, reap its sandboxes, start another; the new actor's id."""
        if actor_id not in self._actors:
            return None
        log.warning("actor %s died: %s; replacing it", actor_id, why)
        self.stats["actors_died"] += 1
        del self._actors[actor_id]
        self._free = deque(s for s in self._free if s.actor_id != actor_id)
        self._reap(actor_id)
        self._dead.append(actor_id)
        return self._spawn_actor()

    def _reap(self, actor_id: str) -> None:
        try:
            reap(self.backend, actor_id)
        except InfraError as e:
            log.warning("cannot reap %s's sandboxes: %s", actor_id, e)

    def close(self) -> None:
        """Stop every actor and remove every sandbox they owned. Idempotent."""
        for actor_id, handle in list(self._actors.items()):
            try:
                ray.get(handle.close.remote(), timeout=60)
            except Exception:
                pass
            ray.kill(handle)
            self._reap(actor_id)
        for actor_id in self._dead:  # a start the dead actor asked for can land after its first reap
            self._reap(actor_id)
        self._dead.clear()
        self._actors.clear()
        self._actor_where.clear()
        self._free.clear()
        self._inflight.clear()
        self._reserved.clear()

    def __enter__(self) -> RolloutRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------- streaming
    def _todo(self, done: set[tuple[str, int]]) -> deque[Work]:
        return deque(
            Work(t.instance_id, a)
            for a in range(self.attempts)
            for t in self.tasks
            if (t.instance_id, a) not in done
        )

    def run(self, work: Iterable[tuple[str, int]] | None = None) -> list[Episode]:
        out: list[Episode] = []
        for item in self.stream(work):
            out.extend(item if isinstance(item, list) else [item])
        return out

    def stream(self, work: Iterable[tuple[str, int]] | None = None) -> Iterator[Episode | list[Episode]]:
        """Yield each Episode as it finishes (or each complete group, with ``group=True``).

        ``work``: exactly these (task_id, attempt) pairs instead of every task's
        ``attempts`` (a trainer's batch); the sink is appended to, not resumed from.
        """
        self.start()
        done: set[tuple[str, int]] = set()
        groups: dict[str, list[Episode]] = defaultdict(list)
        sink = None
        explicit = None if work is None else self._explicit(work)
        if self.sink_path:
            if self.resume and explicit is None and self.sink_path.exists():
                previous = [
                    ep
                    for ep in JsonlSink.read(self.sink_path)
                    if ep.task_id in self.by_id and not ep.infra_error
                ]
                done = {ep.key for ep in previous}
                for ep in previous:
                    groups[ep.task_id].append(ep)
            sink = JsonlSink(self.sink_path)
        queue = self._todo(done) if explicit is None else explicit
        finished = False
        self._reserved.clear()
        try:
            while queue or self._inflight or self._reserved:
                self._fill(queue)
                if not self._inflight:
                    if queue and self._free:  # only retries that are backing off
                        time.sleep(max(0.0, min(w.not_before for w in queue) - time.monotonic()))
                        continue
                    raise InfraError("no actor slot is available to run the remaining episodes")
                for ep in self._collect(queue):
                    if not self._admit(ep, queue):
                        continue
                    if sink:
                        sink.write(ep)
                    self.stats[ep.status or "ungraded"] += 1
                    if not self.group:
                        yield ep
                        continue
                    groups[ep.task_id].append(ep)
                    if len(groups[ep.task_id]) == self.attempts:
                        yield sorted(groups.pop(ep.task_id), key=lambda e: e.attempt)
            finished = True
        finally:
            if sink:
                sink.close()
            if not finished:
                self.close()  # interrupted: leave nothing running

    def _explicit(self, work: Iterable[tuple[str, int]]) -> deque[Work]:
        queue = deque(Work(task_id, attempt) for task_id, attempt in work)
        unknown = sorted({w.task_id for w in queue} - set(self.by_id))
        if unknown:
            raise ConfigError(f"unknown task ids in the work list: {unknown}")
        return queue

    def _admit(self, ep: Episode, queue: deque[Work]) -> bool:
        """Stamp the episode's policy version and age; False if it is too stale to hand out."""
        w = self._work_of.pop(ep.key, None) or Work(ep.task_id, ep.attempt, version=self.policy_version)
        if ep.policy_version is None:
            ep.policy_version = w.version
        ep.age = self.policy_version - ep.policy_version
        ep.timings["age"] = time.monotonic() - w.born if w.born else 0.0
        if self.max_staleness is None or ep.age <= self.max_staleness or ep.infra_error:
            return True
        if self.stale == "rerun" and w.stale_reruns == 0:
            self.stats["stale_rerun"] += 1
            queue.appendleft(replace(w, retries=0, avoid=None, not_before=0.0, stale_reruns=1))
            return False
        if self.stale == "drop":
            self.stats["stale_dropped"] += 1
            return False
        self.stats["stale_kept"] += 1  # re-run once already: hand it out rather than starve it
        return True

    def _take_slot(self, avoid: str | None) -> ActorSlot:
        for i, slot in enumerate(self._free):
            if slot.actor_id != avoid:
                del self._free[i]
                return slot
        return self._free.popleft()

    def _fill(self, queue: deque[Work]) -> None:
        now = time.monotonic()
        launched: list[Running] = []
        for slot in [s for s in self._free if s in self._reserved]:  # its sandbox is warming: run it
            if self.in_flight + len(launched) >= self.max_in_flight:
                break
            self._free.remove(slot)
            launched.append(Running(self._reserved.pop(slot), slot))
        for work in [w for w in queue if w.not_before <= now]:
            if not self._free or self.in_flight + len(launched) >= self.max_in_flight:
                break
            queue.remove(work)
            launched.append(Running(work, self._take_slot(work.avoid)))
        while self._free and self._reserved and self.in_flight + len(launched) < self.max_in_flight:
            _, work = self._reserved.popitem()  # nothing else to do: run another slot's next item
            self.stats["reservations_taken"] += 1
            launched.append(Running(work, self._take_slot(None)))
        for run in launched:  # reserve only what the free slots left over
            self._launch(run, self._reserve(run.slot, queue, now))

    def _reserve(self, slot: ActorSlot, queue: deque[Work], now: float) -> Work | None:
        """Take the slot's next item out of the queue, so its env warms that sandbox meanwhile."""
        if not self.reserve_next or slot in self._reserved:
            return self._reserved.get(slot)
        for work in queue:
            if work.not_before <= now and work.avoid != slot.actor_id:
                queue.remove(work)
                self._reserved[slot] = work
                return work
        return None

    def _retry(self, w: Work, queue: deque[Work], avoid: str) -> None:
        """Requeue ``w`` on another actor after a backoff (1, 2, 4... times retry_delay)."""
        self.stats["retried"] += 1
        delay = self.retry_delay * 2**w.retries
        queue.appendleft(replace(w, retries=w.retries + 1, avoid=avoid, not_before=time.monotonic() + delay))

    def _launch(self, run: Running, next_work: Work | None = None) -> None:
        """Start the episode; ``next_work``: the slot's reserved next item, whose sandbox its env
        starts during this episode (none: the env refills the current image, as always)."""
        w, s = run.work, run.slot
        w.version = self.policy_version
        w.born = w.born or time.monotonic()
        hint = {"next_task": next_work.task_id} if next_work is not None else {}
        if self.policy.placement == "actor":
            ref = s.handle.run_episode.remote(
                s.index, w.task_id, w.attempt, self._policy_ref, self._snapshot_ref, **hint
            )
            run.kind = "episode"
        else:
            ref = s.handle.reset.remote(s.index, w.task_id, w.attempt, self._snapshot_ref, **hint)
            run.kind = "reset"
        self._inflight[ref] = [run]

    @property
    def in_flight(self) -> int:
        """Episodes running now, readable from another thread than the stream's (a trainer
        checking that episodes run during its update)."""
        return sum(len(runs) for runs in list(self._inflight.values()))

    def _collect(self, queue: deque[Work]) -> list[Episode]:
        """Wait for at least one result, take every ready one, return finished episodes."""
        refs = list(self._inflight)
        delayed = [w.not_before for w in queue if w.not_before > time.monotonic()]
        timeout = max(0.0, min(delayed) - time.monotonic()) if delayed and self._free else None
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if not ready:
            return []
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0) if len(refs) > 1 else (ready, None)
        finished: list[Episode] = []
        need_action: list[tuple[Running, str]] = []
        for ref in ready:
            runs = self._inflight.pop(ref, None)
            if runs is None:  # already requeued: its actor died earlier in this batch
                continue
            try:
                result = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                self._lost(runs, e, queue, finished)
                continue
            except ray.exceptions.RayTaskError as e:
                for run in runs:
                    self._task_error(run, str(e), queue, finished)
                continue
            # A step call is a step_many: one reply per run; reset and run_episode: one run.
            for run, res in zip(runs, result if runs[0].kind == "step" else [result], strict=True):
                if run.kind == "episode":
                    self._episode_done(run, Episode.from_dict(res), queue, finished)
                    continue
                obs, info = res
                if "exception" in info:
                    self._task_error(run, info["exception"], queue, finished)
                    continue
                if info.get("done"):
                    self._episode_done(run, Episode.from_dict(info["episode"]), queue, finished)
                    continue
                if run.kind == "reset":
                    run.state = self.policy.start(self.by_id[run.work.task_id], run.work.attempt)
                need_action.append((run, obs))
        if need_action:
            decisions = act_batch(self.policy, [r.state for r, _ in need_action], [o for _, o in need_action])
            by_actor: dict[str, list[tuple[Running, Decision]]] = defaultdict(list)
            for (run, _), d in zip(need_action, decisions, strict=True):
                run.kind = "step"
                by_actor[run.slot.actor_id].append((run, d))
            # One round trip per actor for all of its envs' actions of this decision round.
            for pairs in by_actor.values():
                items = [(run.slot.index, d.action, d.info) for run, d in pairs]
                self._inflight[pairs[0][0].slot.handle.step_many.remote(items)] = [run for run, _ in pairs]
        return finished

    def _task_error(self, run: Running, error: str, queue: deque[Work], finished: list[Episode]) -> None:
        """An exception escaped the actor's episode loop or step (a bug, or an error nobody
        classified). Never a score: an infra error, retried, with the trace."""
        log.error(
            "episode %s #%d failed in %s: %s", run.work.task_id, run.work.attempt, run.slot.actor_id, error
        )
        self.stats["task_errors"] += 1
        ep = Episode(run.work.task_id, run.work.attempt, status="infra_error", reason="exception",
                     error=error[-4000:], where={"actor": run.slot.actor_id})  # fmt: skip
        self._episode_done(run, ep, queue, finished)

    def _episode_done(self, run: Running, ep: Episode, queue: deque[Work], finished: list[Episode]) -> None:
        self._free.append(run.slot)
        ep.retries = run.work.retries
        if ep.infra_error and run.work.retries < self.max_retries and "ImageMissing:" not in ep.error:
            # (a missing image stays missing: retrying only repeats the error)
            self._retry(run.work, queue, run.slot.actor_id)
            return
        self._work_of[ep.key] = run.work
        finished.append(ep)

    def _lost(
        self, runs: list[Running], error: BaseException, queue: deque[Work], finished: list[Episode]
    ) -> None:
        """The actor died: redo these episodes elsewhere (and every other one it held)."""
        dead = runs[0].slot.actor_id
        victims = runs + [r for rs in self._inflight.values() for r in rs if r.slot.actor_id == dead]
        self._inflight = {k: rs for k, rs in self._inflight.items() if rs[0].slot.actor_id != dead}
        for slot in [s for s in self._reserved if s.actor_id == dead]:  # its warm sandbox died with it
            queue.appendleft(self._reserved.pop(slot))
        if dead in self._actors:
            self._check_node(dead, sum(r.work.retries < self.max_retries for r in victims), error)
        self._actor_died(dead, error)
        for r in victims:
            w = r.work
            if w.retries < self.max_retries:
                self._retry(w, queue, dead)
            else:
                finished.append(
                    Episode(w.task_id, w.attempt, status="infra_error", reason="actor_died",
                            error=f"actor {dead} died: {error}", retries=w.retries)
                )  # fmt: skip

    def _check_node(self, actor_id: str, retried: int, error: BaseException) -> None:
        """Did ``actor_id`` die with its node? Then count its episodes as node deaths, and avoid the node."""
        node = self._dead_node(actor_id, error)
        if node is not None:
            log.warning("node %s (%s) died with actor %s: retrying %d episode(s) elsewhere",
                        node["ray_node"], node["ray_node_id"], actor_id, retried)  # fmt: skip
            self._node_died(node, retried=retried)

    def _dead_node(self, actor_id: str, error: BaseException) -> dict[str, str] | None:
        """The node ``actor_id`` died with, if its raylet is gone: where the actor said it runs,
        or (it never ran) the node its death message names. None: its node is alive, or unknown."""
        try:
            node = ray.get(self._actor_where.pop(actor_id), timeout=0)
        except (KeyError, ray.exceptions.RayError):
            node_id = died_on(error)
            if node_id is None:
                return None
            node = {"ray_node_id": node_id, "ray_node": (node_info(node_id) or {}).get("NodeName", "")}
        return node if raylet_dead(node["ray_node_id"]) else None

    def _node_died(self, node: dict[str, str], retried: int = 0, replaced: int = 0) -> None:
        """Record a dead node: ``retried`` episodes redone elsewhere, ``replaced`` actors started elsewhere."""
        self.stats["retried_node_died"] += retried
        self.stats["actors_replaced_node_died"] += replaced
        if replaced:
            log.warning("node %s (%s) died while %d actor(s) were being created on it: starting them elsewhere",
                        node["ray_node"], node["ray_node_id"], replaced)  # fmt: skip
        known = next((f for f in self.node_failures if f.node_id == node["ray_node_id"]), None)
        if known is None:
            known = NodeFailure(node["ray_node_id"], node["ray_node"], time.time(), 0)
            self.node_failures.append(known)
        known.episodes_retried += retried
        known.actors_replaced += replaced
