"""Kubernetes backend: one pod per sandbox, one exec websocket to its command server.

Uses the official ``kubernetes`` client (``pip install 'swerl[kubernetes]'``). The
pod's PID 1 is the same init as on Docker (``shell.INIT_SCRIPT``) and the pod has
an ``activeDeadlineSeconds`` equal to the sandbox lifetime, so a pod left behind by
a dead process ends on its own before the reaper deletes it. Per-command timeouts
are enforced by the command server, separately.

Auth: in a pod (a Ray worker on KubeRay) the service account token is used
(``load_incluster_config``); elsewhere the kubeconfig (``$KUBECONFIG`` or
``~/.kube/config``, or ``KubernetesConfig.kubeconfig``/``context``).

Kubernetes has no per-pod pids limit in the pod spec: it is the kubelet's
``podPidsLimit``. The requested limit is recorded in the ``swerl.io/pids-limit``
annotation. Network: every pod has its cluster's pod network (an ``eth0``), and the
pod spec has no way to opt out; swerl labels a sandbox without network
``swerl.network=none`` and ``swerl.cluster.kuberay`` renders a NetworkPolicy denying
such pods all ingress and egress, which holds only where the CNI enforces
NetworkPolicy (swerl cannot see whether it does).
"""

from __future__ import annotations

import os
import re
import shlex
import time
import uuid
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from swerl.errors import BackendUnavailable, ConfigError, ImageMissing, SandboxError
from swerl.sandbox.base import OWNER_LABEL, RUN_LABEL, ChannelSandbox, SandboxConfig, of_run
from swerl.sandbox.shell import INIT_SCRIPT, ShellChannel, server_command

if TYPE_CHECKING:
    from kubernetes.client import CoreV1Api

NETWORK_LABEL = "swerl.network"
"""``allowed`` on pods whose config asks for network; the deny policy skips those."""
RUN_ANNOTATION = "swerl.io/run"
"""The exact run id (the run label is cut to a valid label value)."""
CONTAINER = "sandbox"
IN_CLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

RBAC_RULES: tuple[dict[str, Any], ...] = (
    # create: start(); get: readiness polling and error hints; delete: close() and
    # reap(); list: reap() by label selector. No watch: readiness is polled.
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete", "get", "list"]},
    # The exec websocket is an HTTP GET upgrade: authorized as "get" on pods/exec,
    # and since Kubernetes 1.35 also as "create" (AuthorizePodWebsocketUpgradeCreatePermission).
    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
)
"""Exactly what this backend asks the API server for; the KubeRay Role grants this."""

DEFAULT_CPU_REQUEST = "250m"
DEFAULT_MEMORY_REQUEST = "512Mi"
IMAGE_REASONS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
FATAL_WAITING = {
    "CreateContainerConfigError",
    "CreateContainerError",
    "CrashLoopBackOff",
    "RunContainerError",
}


def _client() -> Any:
    try:
        import kubernetes
    except ImportError as e:
        raise BackendUnavailable(
            "the kubernetes backend needs the kubernetes client: pip install 'swerl[kubernetes]'"
        ) from e
    return kubernetes


@dataclass(frozen=True)
class KubernetesConfig:
    """Where and how sandbox pods are made (cluster-side settings, not limits)."""

    namespace: str | None = None
    """None: $SWERL_K8S_NAMESPACE, else the in-cluster or kubeconfig namespace, else default."""
    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool | None = None
    """None: in-cluster auth when running in a pod and no kubeconfig is given."""
    image_pull_policy: str = "IfNotPresent"
    node_selector: dict[str, str] = field(default_factory=dict)
    service_account: str | None = None
    """The sandbox pod's own service account (its token is never mounted)."""
    image_pull_secrets: tuple[str, ...] = ()
    cpu_request: str | None = DEFAULT_CPU_REQUEST
    memory_request: str | None = DEFAULT_MEMORY_REQUEST
    """What the scheduler reserves per pod, capped at the limits (None: the limits, i.e.
    Guaranteed QoS). The defaults are below the limits so several sandboxes share a node:
    an agent's sandbox idles most of the time; its limits still cap a burst."""
    unschedulable_grace: float = 0.0
    """Seconds an Unschedulable pod may wait (e.g. for a cluster autoscaler)."""
    request_timeout: float = 30.0

    @classmethod
    def from_env(cls, **overrides: Any) -> KubernetesConfig:
        env = {
            "namespace": os.environ.get("SWERL_K8S_NAMESPACE"),
            "image_pull_policy": os.environ.get("SWERL_K8S_IMAGE_PULL_POLICY"),
            "service_account": os.environ.get("SWERL_K8S_SERVICE_ACCOUNT"),
        }
        kw = {k: v for k, v in env.items() if v}
        known = {f.name for f in fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise ConfigError(f"unknown kubernetes options: {', '.join(sorted(unknown))}")
        kw.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**kw)


# ----------------------------------------------------------------- translation
_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9._-]")


def label_value(value: str) -> str:
    """A valid label value (<= 63 chars, alphanumeric at both ends) for any string."""
    v = _LABEL_VALUE_BAD.sub("-", value)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", v)


def memory_quantity(memory: str | int) -> str:
    """Docker-style memory ("4g", "512m", bytes) as a Kubernetes quantity ("4Gi")."""
    text = str(memory).strip()
    m = re.fullmatch(r"(\d+)([bkmgt]?)", text.lower())
    if m:
        n, unit = m.groups()
        return n if unit in ("", "b") else f"{n}{unit.upper()}i"
    if re.fullmatch(r"\d+(\.\d+)?(Ki|Mi|Gi|Ti|K|M|G|T)?", text):
        return text
    raise ConfigError(f"cannot read memory limit {memory!r} (use e.g. '4g' or '4Gi')")


def cpu_quantity(cpus: float) -> str:
    return f"{max(1, round(cpus * 1000))}m"


def _at_most(request: str | None, limit: str) -> str:
    """The request, or the limit when there is none or it is lower (a request above its
    limit is invalid, and a small sandbox should not reserve more than it may use)."""
    if request is None:
        return limit
    from kubernetes.utils import parse_quantity

    try:
        lower = parse_quantity(str(request)) < parse_quantity(limit)
    except ValueError as e:
        raise ConfigError(f"cannot read the resource request {request!r}: {e}") from e
    return str(request) if lower else limit


def _run_as(user: str) -> dict[str, int]:
    """Kubernetes exec has no user option and runAsUser is numeric: map the config's user."""
    if user in ("root", "0", "0:0", ""):
        return {"runAsUser": 0, "runAsGroup": 0}
    m = re.fullmatch(r"(\d+)(?::(\d+))?", user)
    if not m:
        raise ConfigError(
            f"the kubernetes backend needs a numeric user (uid or uid:gid), not {user!r}: "
            "pods run as runAsUser and exec cannot switch users"
        )
    out = {"runAsUser": int(m.group(1))}
    if m.group(2):
        out["runAsGroup"] = int(m.group(2))
    return out


def pod_manifest(image: str, config: SandboxConfig, kube: KubernetesConfig, name: str) -> dict[str, Any]:
    """The pod for one sandbox: same limits and isolation as the Docker backend."""
    labels = {k: label_value(v) for k, v in config.all_labels().items()}
    labels[NETWORK_LABEL] = "allowed" if config.network else "none"
    limits = {"cpu": cpu_quantity(config.cpus), "memory": memory_quantity(config.memory)}
    requests = {
        "cpu": _at_most(kube.cpu_request, limits["cpu"]),
        "memory": _at_most(kube.memory_request, limits["memory"]),
    }
    lifetime = max(1, int(config.lifetime))
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": lifetime,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostname": "sandbox",
        "terminationGracePeriodSeconds": 2,
        "securityContext": {**_run_as(config.user), "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": CONTAINER,
                "image": image,
                "imagePullPolicy": kube.image_pull_policy,
                "command": ["bash", "-c", INIT_SCRIPT, "swerl-init", str(lifetime)],
                "workingDir": config.workdir,
                "env": [{"name": k, "value": v} for k, v in config.env.items()],
                "resources": {"limits": limits, "requests": requests},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "privileged": False,
                    "capabilities": {"drop": ["ALL"], "add": list(config.cap_add)},
                },
            }
        ],
    }
    if kube.node_selector:
        spec["nodeSelector"] = dict(kube.node_selector)
    if kube.service_account:
        spec["serviceAccountName"] = kube.service_account
    if kube.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in kube.image_pull_secrets]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"swerl.io/pids-limit": str(config.pids_limit), RUN_ANNOTATION: config.run_id},
        },
        "spec": spec,
    }


# ---------------------------------------------------------------- connection
@lru_cache(maxsize=16)
def _configuration(kubeconfig: str | None, context: str | None, in_cluster: bool | None) -> tuple[Any, str]:
    k8s = _client()
    from kubernetes.config.config_exception import ConfigException

    cfg = k8s.client.Configuration()
    try:
        if in_cluster or (in_cluster is None and not kubeconfig and _running_in_pod()):
            k8s.config.load_incluster_config(client_configuration=cfg)
            with open(IN_CLUSTER_NAMESPACE_FILE) as f:
                return cfg, f.read().strip() or "default"
        path = kubeconfig or os.path.expanduser("~/.kube/config")
        k8s.config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
        _, active = k8s.config.list_kube_config_contexts(config_file=path)
        if context:
            contexts, _ = k8s.config.list_kube_config_contexts(config_file=path)
            active = next((c for c in contexts if c["name"] == context), active)
        return cfg, (active or {}).get("context", {}).get("namespace") or "default"
    except (ConfigException, OSError) as e:
        raise BackendUnavailable(
            f"no Kubernetes credentials: {e}. Set KUBECONFIG (or ~/.kube/config) or run in a pod "
            "with a service account."
        ) from e


def _running_in_pod() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not os.environ.get("KUBECONFIG")


def connect(kube: KubernetesConfig | None = None) -> tuple[CoreV1Api, str]:
    """A CoreV1Api and the namespace to use. Each call gets its own ApiClient."""
    kube = kube or KubernetesConfig.from_env()
    k8s = _client()
    path = kube.kubeconfig or (os.environ.get("KUBECONFIG") if not kube.in_cluster else None)
    cfg, namespace = _configuration(path, kube.context, kube.in_cluster)
    return k8s.client.CoreV1Api(k8s.client.ApiClient(cfg)), kube.namespace or namespace


def _api_error(what: str, e: Exception) -> SandboxError:
    status = getattr(e, "status", None)
    if status is None or status == 0:
        return BackendUnavailable(f"cannot reach the Kubernetes API to {what}: {e}")
    body = (getattr(e, "body", None) or getattr(e, "reason", "") or "").strip()
    hint = " (the service account lacks RBAC: see swerl.cluster.kuberay)" if status == 403 else ""
    return SandboxError(f"cannot {what}: HTTP {status}: {body[:500]}{hint}")


def _api_errors() -> tuple[type[Exception], ...]:
    import urllib3.exceptions
    from kubernetes.client.exceptions import ApiException

    return (ApiException, urllib3.exceptions.HTTPError, OSError)


def _delete_pod(api: CoreV1Api, namespace: str, name: str) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        api.delete_namespaced_pod(name, namespace, grace_period_seconds=0, _request_timeout=30)
    except ApiException as e:
        if e.status != 404:
            raise


def pod_problem(pod: Any, since_unschedulable: float | None = None) -> SandboxError | None:
    """The infra error a pod's status shows, if any (None while it may still start)."""
    st = pod.status
    name = pod.metadata.name
    if st is None:
        return None
    if st.phase in ("Failed", "Succeeded"):
        why = ": ".join(x for x in (st.reason, st.message) if x) or _terminated(st)
        return SandboxError(f"pod {name} is {st.phase}: {why}")
    for cs in st.container_statuses or []:
        waiting = cs.state.waiting if cs.state else None
        if waiting and waiting.reason in IMAGE_REASONS:
            return ImageMissing(
                f"pod {name}: {waiting.reason}: {waiting.message or ''} — the nodes cannot pull "
                f"{cs.image!r}. Push the task image to a registry the nodes can reach (set the "
                "image prefix), or preload it on the nodes and use imagePullPolicy IfNotPresent/Never."
            )
        if waiting and waiting.reason in FATAL_WAITING:
            return SandboxError(f"pod {name}: {waiting.reason}: {waiting.message or ''}")
        if cs.state and cs.state.terminated:
            return SandboxError(f"pod {name}: container ended: {_terminated(st)}")
    for cond in st.conditions or []:
        unschedulable = (
            cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable"
        )
        if unschedulable and (since_unschedulable is None or since_unschedulable <= 0):
            return SandboxError(f"pod {name} is Unschedulable: {cond.message}")
    return None


def _terminated(st: Any) -> str:
    for cs in st.container_statuses or []:
        t = cs.state.terminated if cs.state else None
        if t:
            return f"exit {t.exit_code} ({t.reason or ''}) {t.message or ''}".strip()
    return "no reason given"


def _ready(pod: Any) -> bool:
    st = pod.status
    if st is None or st.phase != "Running":
        return False
    return any(cs.name == CONTAINER and cs.state and cs.state.running for cs in st.container_statuses or [])


class _WSStream:
    """recv/send/set_timeout over the exec websocket: stdout bytes only, undecoded.

    Frames are read with websocket-client's own blocking ``recv_data_frame`` under a
    socket timeout, not through ``WSClient.update()``: that polls the raw TCP socket,
    and frames TLS has already decrypted and buffered (``SSLSocket.pending()``) never
    wake it, so a reply larger than a TLS record could hang until the timeout. Every
    transport failure comes out as an ``OSError`` (the channel turns it into a
    ``SandboxError``), never as a websocket-client exception.
    """

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.timeout: float | None = None
        self.stderr = bytearray()
        self._status = bytearray()
        self._open = True

    def send(self, data: bytes) -> None:
        import websocket

        if not self._open:
            raise OSError("the exec websocket is closed")
        try:
            for i in range(0, max(len(data), 1), 1 << 20):
                self.ws.write_stdin(data[i : i + (1 << 20)])
        except websocket.WebSocketException as e:
            self._open = False
            raise OSError(f"exec websocket: {type(e).__name__}: {e}") from e

    def set_timeout(self, timeout: float | None) -> None:
        self.timeout = timeout

    def recv(self) -> bytes:
        import websocket

        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        sock = self.ws.sock
        while self._open:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError("timed out waiting for the command server")
            try:
                sock.settimeout(left)
                opcode, frame = sock.recv_data_frame(True)
            except websocket.WebSocketTimeoutException as e:
                raise TimeoutError("timed out waiting for the command server") from e
            except websocket.WebSocketConnectionClosedException:
                self._open = False
                break
            except (websocket.WebSocketException, OSError, ValueError) as e:
                self._open = False
                raise OSError(f"exec websocket: {type(e).__name__}: {e}") from e
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                self._open = False
                break
            if opcode not in (websocket.ABNF.OPCODE_BINARY, websocket.ABNF.OPCODE_TEXT):
                continue  # ping/pong: websocket-client already answered a ping
            data = frame.data if isinstance(frame.data, bytes) else frame.data.encode()
            if len(data) < 2:
                continue
            channel, payload = data[0], data[1:]
            if channel == 1:
                return payload
            if channel == 2:
                self.stderr += payload
                del self.stderr[:-65536]
            elif channel == 3:
                self._status += payload
        return b""

    def status(self) -> str:
        """What the API server said on the error channel (set when the exec ended)."""
        return self._status.decode(errors="replace").strip()

    def close(self) -> None:
        self._open = False
        try:
            self.ws.close()
        except Exception:  # closing a broken websocket: nothing left to release
            pass


class KubernetesSandbox(ChannelSandbox):
    """A sandbox in a Kubernetes pod of the task image."""

    backend = "kubernetes"

    def __init__(
        self,
        image: str,
        config: SandboxConfig | None = None,
        kube: KubernetesConfig | None = None,
        api: CoreV1Api | None = None,
        name: str | None = None,
        **kube_options: Any,
    ) -> None:
        super().__init__(image, config)
        self.kube = kube or KubernetesConfig.from_env(**kube_options)
        self.name = name or f"swerl-{uuid.uuid4().hex[:12]}"
        self._api = api
        self.namespace = self.kube.namespace
        self.pod_created = False
        self._stream: _WSStream | None = None

    @property
    def describe(self) -> str:
        return f"kubernetes sandbox {self.namespace}/{self.name} ({self.image})"

    # ------------------------------------------------------------- lifecycle
    def start(self) -> KubernetesSandbox:
        self._refuse_if_closed()
        if self._channel:
            return self
        if self._api is None:
            self._api, ns = connect(self.kube)
            self.namespace = self.namespace or ns
        self.namespace = self.namespace or "default"
        body = pod_manifest(self.image, self.config, self.kube, self.name)
        try:
            self._api.create_namespaced_pod(self.namespace, body, _request_timeout=self.kube.request_timeout)
        except _api_errors() as e:
            raise _api_error(f"create pod {self.name} in {self.namespace}", e) from e
        self.pod_created = True
        self._own(_delete_pod, self._api, self.namespace, self.name)
        try:
            self._wait_running()
            self._open_channel()
        except BaseException:
            self.close()
            raise
        return self

    def _read_pod(self, missing_ok: bool = False) -> Any:
        """The pod; with ``missing_ok``, None when it no longer exists."""
        try:
            return self._api.read_namespaced_pod(
                self.name, self.namespace, _request_timeout=self.kube.request_timeout
            )
        except _api_errors() as e:
            if missing_ok and getattr(e, "status", None) == 404:
                return None
            raise _api_error(f"read pod {self.name}", e) from e

    def _wait_running(self) -> None:
        start = time.monotonic()
        deadline = start + self.config.start_timeout
        delay = 0.02
        pod = None
        while True:
            pod = self._read_pod()
            if _ready(pod):
                return
            grace = start + self.kube.unschedulable_grace - time.monotonic()
            problem = pod_problem(pod, since_unschedulable=grace)
            if problem is not None:
                raise problem
            if time.monotonic() > deadline:
                phase = pod.status.phase if pod.status else "unknown"
                raise SandboxError(
                    f"pod {self.name} not running after {self.config.start_timeout:.0f}s (phase {phase})"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)

    def _exec(self, command: list[str], stdin: bool, **kwargs: Any) -> Any:
        """An exec websocket into the sandbox's container (stdout and stderr, no tty); the channel's
        and a second one beside it. ``ApiException`` passes up."""
        from kubernetes.client import CoreV1Api
        from kubernetes.stream import stream

        # stream() swaps call_api on the ApiClient it is given, so give each exec its own.
        exec_api = CoreV1Api(type(self._api.api_client)(self._api.api_client.configuration))
        return stream(
            exec_api.connect_get_namespaced_pod_exec,
            self.name,
            self.namespace,
            command=command,
            container=CONTAINER,
            stdin=stdin,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
            **kwargs,
        )

    def _open_channel(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            ws = self._exec(server_command(self.config), stdin=True, binary=True)
        except ApiException as e:
            raise SandboxError(f"cannot open the exec websocket to pod {self.name}: {e.reason}") from e
        self._stream = _WSStream(ws)
        self._channel = ShellChannel(
            send=self._stream.send,
            recv=self._stream.recv,
            set_timeout=self._stream.set_timeout,
            describe=self.describe,
            probe=self._gone,
        )
        self._channel.handshake(self.config.start_timeout)

    def _interrupt(self, server_pid: int, ctl: str) -> None:
        """A second exec into the pod, beside the channel's."""
        from kubernetes.client.exceptions import ApiException

        script = f"printf 'K\\n' >{shlex.quote(ctl)}"
        try:
            ws = self._exec(["sh", "-c", script], stdin=False)
            ws.run_forever(timeout=30)
            rc, err = ws.returncode, ws.read_all()
            ws.close()
        except (ApiException, OSError) as e:
            raise SandboxError(f"{self.describe}: cannot exec beside the channel: {e}") from e
        if rc:
            raise SandboxError(f"{self.describe}: {script!r} exited {rc}: {err[-300:]}")

    def _close_transport(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _gone(self) -> str | None:
        """Why the pod cannot answer any more (deleted, evicted, ended), or None while it can
        or the API server cannot tell (the command's own deadline still applies)."""
        try:
            pod = self._read_pod(missing_ok=True)
        except SandboxError:
            return None
        if pod is None:
            return f"pod {self.name} no longer exists: deleted during the command"
        if pod.metadata.deletion_timestamp:
            return f"pod {self.name} is being deleted"
        if _ready(pod):
            return None
        problem = pod_problem(pod)
        return str(problem) if problem else f"pod {self.name} stopped running during the command"

    def _state_hint(self) -> str:
        bits = []
        if self._stream is not None and (status := self._stream.status()):
            bits.append(f"exec status {status[:300]}")
        try:
            pod = self._read_pod(missing_ok=True)
        except SandboxError as e:
            bits.append(str(e)[:300])
        else:
            if pod is None:
                bits.append(f"pod {self.name} no longer exists: deleted (reaped, or evicted through the API)")
            elif problem := pod_problem(pod):
                bits.append(str(problem))
            else:
                gone = " and is being deleted" if pod.metadata.deletion_timestamp else ""
                bits.append(f"pod phase {pod.status.phase}{gone}")
        return f" ({'; '.join(bits)})" if bits else ""


def reap(
    run_id: str | None = None,
    api: CoreV1Api | None = None,
    namespace: str | None = None,
    kube: KubernetesConfig | None = None,
) -> int:
    """Delete swerl pods: of one run, or all of them, in the namespace. Returns how many."""
    if api is None:
        api, ns = connect(kube)
        namespace = namespace or (kube.namespace if kube else None) or ns
    namespace = namespace or "default"
    try:
        listed = api.list_namespaced_pod(
            namespace, label_selector=f"{OWNER_LABEL}=swerl", _request_timeout=30
        )
        # The run id itself is an annotation (a label value is cut to 63 characters).
        pods = [p for p in listed.items if not run_id or of_run(_run_of(p), run_id)]
        for pod in pods:
            _delete_pod(api, namespace, pod.metadata.name)
    except _api_errors() as e:
        raise _api_error(f"reap pods in {namespace}", e) from e
    return len(pods)


def _run_of(pod: Any) -> str:
    meta = pod.metadata
    return (meta.annotations or {}).get(RUN_ANNOTATION) or (meta.labels or {}).get(RUN_LABEL, "")
