"""HFGenerator: batched sampling from a transformers causal LM, with per-token logprobs.

The ``Generator`` a ``ModelPolicy`` calls when the model is a local ``transformers``
model (the trainer's own, on any device): prompts are left-padded into one batch,
and each completion is cut after its first end-of-turn token. Logprobs are those
of the distribution sampled from (after temperature and top-k/top-p).
"""

from __future__ import annotations

import threading
from typing import Any

from swerl.policies.model import Generation


class HFGenerator:
    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_new_tokens: int = 32,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self._lock = threading.Lock()
        self._staged: tuple[dict[str, Any], int | None] | None = None
        self._staged_lock = threading.Lock()
        self.version: int | None = None
        """The policy version of the weights it samples with (``load_weights(..., version)``)."""

    def load_weights(self, model: Any, version: int | None = None) -> None:
        """Stage a copy of ``model``'s weights; the next ``generate`` starts from them.

        For a sampler that runs while the trainer updates its own copy
        (``swerl.rollout.prefetch``): the trainer pays for the copy but never waits for a
        generation in progress, and each ``Generation`` carries the ``version`` it was sampled by.
        """
        import torch

        with torch.no_grad():
            staged = {k: v.detach().clone() for k, v in model.state_dict().items()}
        with self._staged_lock:
            self._staged = (staged, version)

    def generate(self, prompts: list[list[int]], max_new_tokens: list[int] | None = None) -> list[Generation]:
        """One completion per prompt; ``max_new_tokens`` caps each (below this generator's own)."""

        caps = [min(self.max_new_tokens, c) for c in max_new_tokens or [self.max_new_tokens] * len(prompts)]
        with self._lock:
            with self._staged_lock:
                staged, self._staged = self._staged, None
            if staged is not None:
                self.model.load_state_dict(staged[0])
                self.version = staged[1]
            return self._generate(prompts, caps)

    def _generate(self, prompts: list[list[int]], caps: list[int]) -> list[Generation]:
        import torch

        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        width = max(len(p) for p in prompts)
        device = self.model.device
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        sample = self.temperature > 0
        kwargs = {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p} if sample else {}
        training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                out = self.model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    do_sample=sample,
                    max_new_tokens=max(caps),
                    pad_token_id=pad,
                    eos_token_id=eos,
                    output_scores=True,
                    return_dict_in_generate=True,
                    **kwargs,
                )
                scores = self.model.compute_transition_scores(
                    out.sequences, out.scores, normalize_logits=True
                )
        finally:
            self.model.train(training)
        gens = []
        for row, lp, cap in zip(out.sequences[:, width:].tolist(), scores.tolist(), caps, strict=True):
            row = row[:cap]
            n = row.index(eos) + 1 if eos in row else len(row)
            reason = "stop" if eos in row else "length"
            gens.append(Generation(row[:n], [float(x) for x in lp[:n]], reason, self.version))
        return gens
