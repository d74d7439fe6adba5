"""A test double for verl's ``LLMServerClient``: the tiny local model behind a Ray actor.

verl's rollout servers (vLLM, SGLang) cannot generate on CPU. ``TinyServer`` (a Ray
actor) samples the tiny model and keeps every prompt it was sent, by request id;
``TinyServerClient`` has the client's contract (``async generate(request_id, *,
prompt_ids, sampling_params) -> TokenOutput``, honouring ``max_tokens``) and can be
pickled into verl's worker actors, as verl passes its own client. When it is unpickled
(in the worker, before the worker is built) it tells the server whether
``swerl.integrations.verl`` was already imported there.

This module must not import ``swerl.integrations.verl``: the tests build verl's worker
in a process where only verl itself may import it.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

MODULE = "swerl.integrations.verl"


class TinyServer:
    """Samples the tiny model (at most ``max_new_tokens`` per call), records prompts and notes."""

    def __init__(self, model_dir: str, max_new_tokens: int = 6) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from swerl.integrations.hf import HFGenerator

        tok = AutoTokenizer.from_pretrained(model_dir)
        self.sampler = HFGenerator(
            AutoModelForCausalLM.from_pretrained(model_dir), tok, max_new_tokens=max_new_tokens
        )
        self.prompts: dict[str, list[list[int]]] = {}
        self.caps: list[int | None] = []
        self.notes: list[dict[str, Any]] = []

    def generate(self, request_id: str, prompt_ids: list[int], max_tokens: int | None) -> tuple:
        self.prompts.setdefault(request_id, []).append(list(prompt_ids))
        self.caps.append(max_tokens)
        (g,) = self.sampler.generate([list(prompt_ids)], None if max_tokens is None else [max_tokens])
        return g.ids, g.logprobs

    def note(self, note: dict[str, Any]) -> None:
        self.notes.append(note)

    def seen(self) -> dict[str, Any]:
        return {"prompts": self.prompts, "caps": self.caps, "notes": self.notes}


class TinyServerClient:
    """verl's ``LLMServerClient`` contract over a ``TinyServer`` actor handle.

    ``executor=True`` makes each call go through the event loop's default executor,
    as a client that does blocking work off the loop would.
    """

    def __init__(self, server: Any, executor: bool = False) -> None:
        self.server = server
        self.executor = executor

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.server.note.remote({"pid": os.getpid(), "imported_before_worker": MODULE in sys.modules})

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **kw: Any):
        from verl.workers.rollout.replica import TokenOutput

        call = self.server.generate.remote(request_id, list(prompt_ids), sampling_params.get("max_tokens"))
        if self.executor:
            import ray

            ids, lps = await asyncio.get_running_loop().run_in_executor(None, ray.get, call)
        else:
            ids, lps = await call
        return TokenOutput(token_ids=ids, log_probs=lps, stop_reason="completed")
