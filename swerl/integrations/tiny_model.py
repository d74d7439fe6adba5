"""A tiny, randomly initialised chat model built locally, for tests, notebooks and benchmarks.

No model hub is needed: a byte-level BPE tokenizer is trained with ``tokenizers``
on the bundled tasks' text, wrapped in ``PreTrainedTokenizerFast`` with a
ChatML-style chat template (tools and tool messages included), and paired with
a two-layer ``Qwen2ForCausalLM`` (head_dim 64, so vLLM's CPU attention serves it too). ``tiny_model()`` saves both once and returns
the directory, which ``from_pretrained`` and ``transformers serve`` both load.
``tiny_model(layers=8, hidden=512)`` builds a larger one the same way (random weights, the
same tokenizer), for benchmarks whose trainer should cost what a real model's update costs.
"""

from __future__ import annotations

import os
from pathlib import Path

from swerl.env.actions import FORMAT_HELP
from swerl.errors import ConfigError
from swerl.tasks.sources import load_tasks

CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n# Tools\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] or '' }}"
    "{% for c in m.get('tool_calls') or [] %}<tool_call>{{ c['function'] | tojson }}</tool_call>{% endfor %}"
    "<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VERSION = "3"
LAYERS, HIDDEN = 2, 128
"""The tiny model's size; ``hidden`` is heads x 64 (vLLM's CPU attention needs head_dim 64)."""


def default_dir(layers: int = LAYERS, hidden: int = HIDDEN) -> Path:
    """Where the model is cached: ``$SWERL_TINY_MODEL``, else ``~/.cache/swerl/tiny-model-v3``
    (another size: ``tiny-model-v3-L{layers}-H{hidden}`` beside it)."""
    env = os.environ.get("SWERL_TINY_MODEL")
    base = Path(env) if env else Path.home() / ".cache" / "swerl" / f"tiny-model-v{VERSION}"
    return (
        base if (layers, hidden) == (LAYERS, HIDDEN) else base.with_name(f"{base.name}-L{layers}-H{hidden}")
    )


def check_size(layers: int, hidden: int) -> None:
    if layers < 1:
        raise ConfigError(f"the model needs at least 1 layer, got layers={layers}")
    if hidden < 64 or hidden % 64:
        raise ConfigError(f"hidden must be a positive multiple of 64 (heads of 64), got hidden={hidden}")


def _corpus() -> list[str]:
    texts = [FORMAT_HELP]
    for t in load_tasks("swerl-mini"):
        texts += [t.problem_statement, t.patch, t.test_patch]
    return texts


def build_tokenizer(vocab_size: int = 512):
    """A byte-level BPE tokenizer with ChatML special tokens and the chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
    )


def build_model(tokenizer, seed: int = 0, layers: int = LAYERS, hidden: int = HIDDEN):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    check_size(layers, hidden)
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,  # head_dim 64: the smallest vLLM's CPU attention accepts
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 64,
        max_position_embeddings=8192,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,  # vLLM's in-place weight reload skips a tied lm_head
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.do_sample = True  # as real chat models ship: servers sample by default
    return model


def tiny_model(
    path: str | os.PathLike | None = None, seed: int = 0, layers: int = LAYERS, hidden: int = HIDDEN
) -> Path:
    """Build (once) and save the tiny model (or one of ``layers`` x ``hidden``) and its
    tokenizer; return the directory."""
    check_size(layers, hidden)
    out = Path(path) if path else default_dir(layers, hidden)
    if (out / "config.json").exists() and (out / "tokenizer.json").exists():
        return out
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(tmp)
    build_model(tokenizer, seed, layers, hidden).save_pretrained(tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(out)
    except OSError:  # another process saved it first
        pass
    return out
