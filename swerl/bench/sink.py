"""The episode sink with token arrays: 1,000 episodes of 30 model turns, written and read back.

Each turn carries what a model policy records (a 300-token prompt delta, 100
completion ids and their logprobs; the first turn a 2,000-token prompt). swerl's
sink (orjson, fsync per episode) is measured beside the standard library's
``json`` on the same records (``dataclasses.asdict`` + ``json.dumps`` per line,
the sink's encoder before token arrays made it the bottleneck).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import tempfile
import time

from swerl.bench._stats import table
from swerl.episode import Episode, JsonlSink, Sampled, Step


def make_episodes(n: int, turns: int, seed: int = 0) -> list[Episode]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        steps = []
        for k in range(turns):
            completion = [rng.randrange(150_000) for _ in range(100)]
            prompt = [rng.randrange(150_000) for _ in range(2000 if k == 0 else 300)]
            logprobs = [-5 * rng.random() for _ in completion]
            start = 0 if k == 0 else 2000 + k * 400 - 300
            turn = Sampled(completion, prompt, start, logprobs, "stop", policy_version=i // 100)
            steps.append(Step(k + 1, "x" * 200, "y" * 1000, policy=turn.to_info()))
        out.append(Episode(f"task-{i}", 0, steps, status="resolved", reward=1.0))
    return out


def _stdlib_write(path: str, episodes: list[Episode]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for ep in episodes:
            f.write(json.dumps(dataclasses.asdict(ep), allow_nan=False, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())


def _stdlib_read(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if Episode.from_dict(json.loads(line)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swerl.bench sink", description=__doc__)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=30)
    args = parser.parse_args(argv)
    episodes = make_episodes(args.episodes, args.turns)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        with JsonlSink(f"{d}/swerl.jsonl") as sink:
            for ep in episodes:
                sink.write(ep)
        w_swerl = time.perf_counter() - t
        t = time.perf_counter()
        n = sum(1 for _ in JsonlSink.read(f"{d}/swerl.jsonl"))
        r_swerl = time.perf_counter() - t
        assert n == len(episodes)
        t = time.perf_counter()
        _stdlib_write(f"{d}/json.jsonl", episodes)
        w_json = time.perf_counter() - t
        t = time.perf_counter()
        _stdlib_read(f"{d}/json.jsonl")
        r_json = time.perf_counter() - t
        mb = os.path.getsize(f"{d}/swerl.jsonl") / 2**20
    t = time.perf_counter()
    for ep in episodes:
        ep.to_tokens()
    tokens = (time.perf_counter() - t) / len(episodes) * 1000
    rows.append(["swerl sink (orjson)", w_swerl, r_swerl, args.episodes / w_swerl])
    rows.append(["stdlib json", w_json, r_json, args.episodes / w_json])
    print(
        f"{args.episodes} episodes x {args.turns} turns with token arrays, {mb:.0f} MB; load {os.getloadavg()[0]:.1f}"
    )
    print(table(["encoder", "write s", "read s", "episodes/s written"], rows))
    print(f"swerl vs stdlib json: write {w_json / w_swerl:.1f}x faster, read {r_json / r_swerl:.1f}x faster")
    print(f"Episode.to_tokens: {tokens:.2f} ms per episode")
    return 0
