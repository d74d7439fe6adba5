"""KubernetesAPIDouble: a test double of the Kubernetes API server, backed by Docker.

The real thing (a single-node cluster: API server, scheduler, kubelet, containerd) takes
~8 minutes to build on a fresh machine, more than CI can spend, so CI tests the
kubernetes backend against this, and the same tests run against a real cluster when
``SWERL_K8S_REAL`` names its admin kubeconfig (tests/k8s_real.py). The double is
an HTTPS server on 127.0.0.1 (aiohttp, a throwaway CA) that serves only what the
backend uses, in the wire format the official client expects:

- pods: create, get, delete, list (``labelSelector`` with ``k=v`` / ``k!=v`` / ``k``);
- ``pods/exec`` over a TLS websocket speaking ``v4.channel.k8s.io`` (one byte channel
  id per binary message: 0 stdin, 1 stdout, 2 stderr, 3 error/status), closing the
  exec's stdin as soon as the process closes its stdout or its stderr, as containerd's
  CRI does;
- networkpolicies: create (recorded only: like a CNI without NetworkPolicy support,
  the double does not enforce them).

It is never stronger than the real cluster it stands for: every pod gets a network
(an internal Docker network: pods reach each other and nothing else, like the real
cluster's isolated bridge), whatever its labels or policies say, and the environment
variables the kubelet adds (``KUBELET_ENV``).

Each pod is a real Docker container labelled ``swerl.owner=swerl`` and
``swerl.run=<the pod's swerl.run label>`` (so the session reaper removes it even if
a test fails). Pod status is derived from the container's state. Simulated: image
pull failures (the image is not in the local daemon: ErrImagePull, then
ImagePullBackOff), Unschedulable (requests above the node's allocatable), the
kubelet's eviction (``evict()``: Failed/Evicted), ``activeDeadlineSeconds``, and the
kubelet's ``podPidsLimit``.

RBAC is enforced per bearer token (``rbac={token: rules}``; a token mapped to None is
cluster-admin) and every authorized (resource, verb) is recorded in ``seen[token]``.
Anything else is refused with 404/405/422 and a message naming what is missing.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import json
import re
import select
import socket
import ssl
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import docker
import docker.errors
from aiohttp import WSMsgType, web

OWNER_LABEL = "swerl.owner"
RUN_LABEL = "swerl.run"
POD_LABEL = "swerl.k8s-double.pod"

KUBELET_ENV = {
    "KUBERNETES_SERVICE_HOST": "10.0.0.1",
    "KUBERNETES_SERVICE_PORT": "443",
    "KUBERNETES_SERVICE_PORT_HTTPS": "443",
    "KUBERNETES_PORT": "tcp://10.0.0.1:443",
    "KUBERNETES_PORT_443_TCP": "tcp://10.0.0.1:443",
    "KUBERNETES_PORT_443_TCP_ADDR": "10.0.0.1",
    "KUBERNETES_PORT_443_TCP_PORT": "443",
    "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
}
"""What the kubelet adds to every container, even with ``enableServiceLinks: false``: the
address of the cluster's API service."""

EXEC_WRAPPER = r"""
d=$(mktemp -d) && mkfifo "$d/in" "$d/out" "$d/err" || exit 126
exec 5<&0
cat <&5 >"$d/in" 5<&- & relay=$!
exec 5<&-
{ cat <"$d/out"; kill "$relay" 2>/dev/null; } &
{ cat <"$d/err" >&2; kill "$relay" 2>/dev/null; } >&- &
"$@" <"$d/in" >"$d/out" 2>"$d/err" & cmd=$!
wait "$cmd"
rc=$?
wait
rm -rf -- "$d"
exit "$rc"
"""
"""Runs an exec's command so that its stdin ends as soon as it closes its stdout or its
stderr (the relay feeding it is killed), as containerd's CRI does for an exec."""

_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")
_LABEL_NAME = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")
POD_SPEC_KEYS = {
    "restartPolicy", "activeDeadlineSeconds", "automountServiceAccountToken", "enableServiceLinks",
    "hostname", "terminationGracePeriodSeconds", "securityContext", "containers", "nodeSelector",
    "serviceAccountName", "imagePullSecrets",
}  # fmt: skip
CONTAINER_KEYS = {
    "name", "image", "imagePullPolicy", "command", "args", "workingDir", "env", "resources",
    "securityContext",
}  # fmt: skip


class Refused(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def quantity(q: str | int | float) -> float:
    """A Kubernetes quantity as a number (bytes, or cores)."""
    m = re.fullmatch(r"([0-9.]+)(m|Ki|Mi|Gi|Ti|k|K|M|G|T)?", str(q))
    if not m:
        raise Refused(422, "Invalid", f"quantities must match the regular expression: {q!r}")
    n, unit = float(m.group(1)), m.group(2) or ""
    scale = {"": 1, "m": 1e-3, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    scale |= {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
    return n * scale[unit]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _check_labels(labels: dict[str, str]) -> None:
    for k, v in labels.items():
        prefix, _, name = k.rpartition("/")
        if not name or not _LABEL_NAME.match(name) or (prefix and not _NAME.match(prefix)):
            raise Refused(422, "Invalid", f"metadata.labels: Invalid value: {k!r}: not a valid label key")
        if not isinstance(v, str) or not _LABEL_NAME.match(v):
            raise Refused(422, "Invalid", f"metadata.labels: Invalid value: {v!r}: not a valid label value")


def _selector_matches(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if m := re.fullmatch(r"([^=!\s]+)\s*!=\s*(\S*)", term):
            if labels.get(m[1]) == m[2]:
                return False
        elif m := re.fullmatch(r"([^=!\s]+)\s*==?\s*(\S*)", term):
            if labels.get(m[1]) != m[2]:
                return False
        elif re.fullmatch(r"[^=!\s()]+", term):
            if term not in labels:
                return False
        else:
            raise Refused(400, "BadRequest", f"the double does not implement label selector {term!r}")
    return True


def _policy_selects(policy: dict[str, Any], labels: dict[str, str]) -> bool:
    sel = policy.get("spec", {}).get("podSelector", {})
    if any(labels.get(k) != v for k, v in (sel.get("matchLabels") or {}).items()):
        return False
    for expr in sel.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": labels.get(key) in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def _rule_allows(rule: dict[str, Any], resource: str, verb: str) -> bool:
    group = "networking.k8s.io" if resource == "networkpolicies" else ""
    return all(
        want in rule.get(key, []) or "*" in rule.get(key, [])
        for key, want in (("apiGroups", group), ("resources", resource), ("verbs", verb))
    )


@dataclass
class _Pod:
    body: dict[str, Any]
    created: float = field(default_factory=time.monotonic)
    container_id: str | None = None
    waiting: tuple[str, str] | None = ("ContainerCreating", "")
    pulls: int = 0
    unschedulable: str | None = None
    failed: tuple[str, str] | None = None
    started: float | None = None

    @property
    def name(self) -> str:
        return self.body["metadata"]["name"]

    @property
    def labels(self) -> dict[str, str]:
        return self.body["metadata"].get("labels") or {}


class KubernetesAPIDouble:
    """A fake kube-apiserver + kubelet on one node, for tests (see the module docstring)."""

    def __init__(
        self,
        docker_client: docker.DockerClient,
        rbac: dict[str, list[dict[str, Any]] | None] | None = None,
        node_cpu: float = 64.0,
        node_memory: str = "256Gi",
        pod_pids_limit: int = 1024,
    ) -> None:
        self.docker = docker_client
        self.rbac = rbac if rbac is not None else {"admin": None}
        self.allocatable = {"cpu": node_cpu, "memory": quantity(node_memory)}
        self.pod_pids_limit = pod_pids_limit
        self.pods: dict[tuple[str, str], _Pod] = {}
        self.policies: dict[tuple[str, str], dict[str, Any]] = {}
        self.seen: dict[str, set[tuple[str, str]]] = {t: set() for t in self.rbac}
        self.refusals: list[str] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.ca_pem = b""
        self.network: Any = None
        self._front = socket.socket()

    # ------------------------------------------------------------ server
    def start(self) -> KubernetesAPIDouble:
        app = web.Application(middlewares=[self._errors])
        pods = "/api/v1/namespaces/{ns}/pods"
        app.router.add_post(pods, self._create_pod)
        app.router.add_get(pods, self._list_pods)
        app.router.add_get(pods + "/{name}", self._get_pod)
        app.router.add_delete(pods + "/{name}", self._delete_pod)
        app.router.add_route("*", pods + "/{name}/exec", self._exec)
        app.router.add_post("/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies", self._create_policy)
        app.router.add_route("*", "/{tail:.*}", self._not_implemented)
        self._runner = web.AppRunner(app, access_log=None)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        backend = sock.getsockname()
        self._front = socket.create_server(("127.0.0.1", 0))
        self.port = self._front.getsockname()[1]
        tls = self._tls_context()
        threading.Thread(target=self._serve_tls, args=(tls, backend), daemon=True, name="k8s-tls").start()
        self.network = self.docker.networks.create(
            f"swerl-k8s-double-{uuid.uuid4().hex[:8]}", internal=True, labels={OWNER_LABEL: "swerl"}
        )

        async def serve() -> None:
            await self._runner.setup()
            await web.SockSite(self._runner, sock).start()

        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="k8s-api-double")
        self._thread.start()
        asyncio.run_coroutine_threadsafe(serve(), self._loop).result(10)
        return self

    def _serve_tls(self, tls: ssl.SSLContext, backend: tuple[str, int]) -> None:
        """The TLS front, relaying bytes as they come (as an API server proxying the
        kubelet's stream does): TLS records then straddle websocket frames, so a client
        can have whole frames decrypted and buffered while its socket is quiet."""
        while True:
            try:
                conn, _ = self._front.accept()
            except OSError:
                return  # stopped
            threading.Thread(target=self._relay_tls, args=(tls, conn, backend), daemon=True).start()

    @staticmethod
    def _relay_tls(tls: ssl.SSLContext, conn: socket.socket, backend: tuple[str, int]) -> None:
        try:
            front = tls.wrap_socket(conn, server_side=True)
        except (OSError, ssl.SSLError):
            conn.close()
            return
        back = socket.create_connection(backend)

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while chunk := src.recv(1 << 18):
                    # what arrives within a few ms goes out as one write (a buffered writer)
                    while len(chunk) < 1 << 18 and select.select([src], [], [], 0.005)[0]:
                        more = src.recv(1 << 18)
                        if not more:
                            break
                        chunk += more
                    dst.sendall(chunk)
            except OSError:
                pass
            finally:
                for close in (lambda: dst.shutdown(socket.SHUT_WR), src.close):
                    try:
                        close()
                    except OSError:
                        pass

        threading.Thread(target=pump, args=(back, front), daemon=True).start()
        pump(front, back)

    def _tls_context(self) -> ssl.SSLContext:
        """A throwaway CA and a server certificate for 127.0.0.1: the exec websocket runs
        over TLS, as on a real API server (TLS buffers decrypted frames a poll on the raw
        socket cannot see)."""
        import tempfile

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "k8s-api-double")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
            )
            .sign(key, hashes.SHA256())
        )
        self.ca_pem = cert.public_bytes(serialization.Encoding.PEM)
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory() as tmp:
            with open(f"{tmp}/cert.pem", "wb") as f:
                f.write(self.ca_pem + key_pem)
            ctx.load_cert_chain(f"{tmp}/cert.pem")
        return ctx

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stop serving and remove every container this double started."""
        self._front.close()
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            self._runner = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread:
            self._thread.join(5)
        for pod in list(self.pods.values()):
            self._remove_container(pod)
        self.pods.clear()
        if self.network is not None:
            self.network.remove()
            self.network = None

    def kubeconfig(self, token: str, namespace: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "double",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": base64.b64encode(self.ca_pem).decode(),
                    },
                }
            ],
            "users": [{"name": token, "user": {"token": token}}],
            "contexts": [
                {"name": "double", "context": {"cluster": "double", "user": token, "namespace": namespace}}
            ],
            "current-context": "double",
        }

    @web.middleware
    async def _errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except Refused as e:
            self.refusals.append(f"{request.method} {request.path}: {e.message}")
            return self._status(e.code, e.reason, e.message)

    @staticmethod
    def _status(code: int, reason: str, message: str) -> web.Response:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
        body |= {"message": message, "reason": reason, "code": code}
        return web.json_response(body, status=code)

    def _authorize(self, request: web.Request, resource: str, *verbs: str) -> None:
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ").strip()
        if not auth.startswith("Bearer ") or token not in self.rbac:
            raise Refused(401, "Unauthorized", "Unauthorized")
        rules = self.rbac[token]
        for verb in verbs:
            if rules is not None and not any(_rule_allows(r, resource, verb) for r in rules):
                raise Refused(
                    403,
                    "Forbidden",
                    f'{resource} is forbidden: User "{token}" cannot {verb} resource "{resource}" '
                    f'in namespace "{request.match_info.get("ns")}"',
                )
            self.seen[token].add((resource, verb))

    async def _not_implemented(self, request: web.Request) -> web.Response:
        raise Refused(
            404, "NotFound", f"the Kubernetes API double does not implement {request.method} {request.path}"
        )

    # -------------------------------------------------------------- pods
    async def _create_pod(self, request: web.Request) -> web.Response:
        self._authorize(request, "pods", "create")
        ns = request.match_info["ns"]
        body = await request.json()
        pod = self._admit(ns, body)
        with self._lock:
            if (ns, pod.name) in self.pods:
                raise Refused(409, "AlreadyExists", f'pods "{pod.name}" already exists')
            self.pods[(ns, pod.name)] = pod
        if not pod.unschedulable:
            asyncio.get_running_loop().run_in_executor(None, self._run_pod, ns, pod)
        return web.json_response(self._render(ns, pod), status=201)

    def _admit(self, ns: str, body: dict[str, Any]) -> _Pod:
        if body.get("kind") != "Pod" or body.get("apiVersion") != "v1":
            raise Refused(400, "BadRequest", "expected a v1 Pod")
        meta, spec = body.get("metadata") or {}, body.get("spec") or {}
        if not _NAME.match(meta.get("name", "")):
            raise Refused(422, "Invalid", f"metadata.name: Invalid value: {meta.get('name')!r}")
        _check_labels(meta.get("labels") or {})
        if extra := set(spec) - POD_SPEC_KEYS:
            raise Refused(422, "Invalid", f"the double does not implement spec fields {sorted(extra)}")
        if spec.get("restartPolicy") != "Never":
            raise Refused(422, "Invalid", "the double only implements restartPolicy: Never")
        containers = spec.get("containers") or []
        if len(containers) != 1:
            raise Refused(422, "Invalid", "the double implements pods of exactly one container")
        c = containers[0]
        if extra := set(c) - CONTAINER_KEYS:
            raise Refused(422, "Invalid", f"the double does not implement container fields {sorted(extra)}")
        if not c.get("image"):
            raise Refused(422, "Invalid", "spec.containers[0].image: Required value")
        meta |= {"namespace": ns, "uid": str(uuid.uuid4()), "creationTimestamp": _now()}
        meta["resourceVersion"] = str(int(time.time() * 1000))
        pod = _Pod(body=body)
        requests = (c.get("resources") or {}).get("requests") or {}
        short = [
            k for k in ("cpu", "memory") if k in requests and quantity(requests[k]) > self.allocatable[k]
        ]
        if short:
            pod.unschedulable = (
                "0/1 nodes are available: " + ", ".join(f"1 Insufficient {k}" for k in short) + "."
            )
        return pod

    def _run_pod(self, ns: str, pod: _Pod) -> None:
        spec = pod.body["spec"]
        c = spec["containers"][0]
        try:
            self.docker.images.get(c["image"])
        except docker.errors.ImageNotFound:
            pod.waiting = ("ErrImagePull", f"rpc error: pull access denied for {c['image']}: not found")
            return
        sec = c.get("securityContext") or {}
        psec = spec.get("securityContext") or {}
        caps = sec.get("capabilities") or {}
        uid = sec.get("runAsUser", psec.get("runAsUser"))
        gid = sec.get("runAsGroup", psec.get("runAsGroup"))
        limits = (c.get("resources") or {}).get("limits") or {}
        labels = {
            OWNER_LABEL: "swerl",
            RUN_LABEL: pod.labels.get(RUN_LABEL, "k8s-double"),
            POD_LABEL: f"{ns}.{pod.name}",
        }
        try:
            container = self.docker.containers.create(
                c["image"],
                entrypoint=c.get("command"),
                command=c.get("args"),
                working_dir=c.get("workingDir"),
                environment={**KUBELET_ENV, **{e["name"]: e.get("value", "") for e in c.get("env") or []}},
                user=None if uid is None else (f"{uid}:{gid}" if gid is not None else str(uid)),
                hostname=spec.get("hostname"),
                labels=labels,
                network=self.network.name,
                mem_limit=int(quantity(limits["memory"])) if "memory" in limits else None,
                nano_cpus=int(quantity(limits["cpu"]) * 1e9) if "cpu" in limits else None,
                pids_limit=self.pod_pids_limit,
                cap_drop=caps.get("drop"),
                cap_add=caps.get("add"),
                security_opt=["no-new-privileges"] if sec.get("allowPrivilegeEscalation") is False else None,
                privileged=bool(sec.get("privileged")),
                detach=True,
            )
            pod.container_id = container.id
            if (ns, pod.name) not in self.pods:  # deleted while creating
                self._remove_container(pod)
                return
            container.start()
            pod.started = time.monotonic()
            pod.waiting = None
        except docker.errors.APIError as e:
            pod.waiting = ("CreateContainerError", str(e))

    def _container_state(self, pod: _Pod) -> dict[str, Any]:
        if pod.container_id is None or pod.waiting:
            return {}
        try:
            return self.docker.api.inspect_container(pod.container_id)["State"]
        except docker.errors.NotFound:
            return {"Status": "exited", "ExitCode": 137, "Error": "container removed"}

    def _render(self, ns: str, pod: _Pod) -> dict[str, Any]:
        """The pod with a status derived from the container, as the kubelet would report it."""
        spec = pod.body["spec"]
        c = spec["containers"][0]
        deadline = spec.get("activeDeadlineSeconds")
        if pod.failed is None and pod.started and deadline and time.monotonic() - pod.started > deadline:
            pod.failed = ("DeadlineExceeded", f"Pod was active on the node longer than {deadline}s")
            self._remove_container(pod)
        cstatus: dict[str, Any] = {"name": c["name"], "image": c["image"], "imageID": "", "restartCount": 0}
        status: dict[str, Any] = {
            "phase": "Pending",
            "conditions": [],
            "startTime": pod.body["metadata"]["creationTimestamp"],
        }
        if pod.unschedulable:
            status["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": pod.unschedulable,
                }
            ]
            return {**pod.body, "status": status}
        status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
        state = self._container_state(pod)
        if pod.failed:
            status |= {"phase": "Failed", "reason": pod.failed[0], "message": pod.failed[1]}
            cstatus |= {"ready": False, "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}
        elif pod.waiting:
            reason, message = pod.waiting
            if reason == "ErrImagePull":
                pod.pulls += 1
                if pod.pulls > 1:
                    reason = "ImagePullBackOff"
                    message = f'Back-off pulling image "{c["image"]}"'
            cstatus |= {"ready": False, "state": {"waiting": {"reason": reason, "message": message}}}
        elif state.get("Status") == "running":
            status["phase"] = "Running"
            status["conditions"].append({"type": "Ready", "status": "True"})
            cstatus |= {"ready": True, "started": True, "state": {"running": {"startedAt": _now()}}}
        elif state.get("Status") in ("exited", "dead"):
            code = state.get("ExitCode", 0)
            status["phase"] = "Succeeded" if code == 0 else "Failed"
            reason = "OOMKilled" if state.get("OOMKilled") else ("Completed" if code == 0 else "Error")
            cstatus |= {"ready": False, "state": {"terminated": {"exitCode": code, "reason": reason}}}
        else:
            cstatus |= {"ready": False, "state": {"waiting": {"reason": "ContainerCreating"}}}
        status["containerStatuses"] = [cstatus]
        return {**pod.body, "status": status}

    def _find(self, request: web.Request) -> tuple[str, _Pod]:
        ns, name = request.match_info["ns"], request.match_info["name"]
        pod = self.pods.get((ns, name))
        if pod is None:
            raise Refused(404, "NotFound", f'pods "{name}" not found')
        return ns, pod

    async def _get_pod(self, request: web.Request) -> web.Response:
        self._authorize(request, "pods", "get")
        ns, pod = self._find(request)
        rendered = await asyncio.get_running_loop().run_in_executor(None, self._render, ns, pod)
        return web.json_response(rendered)

    async def _list_pods(self, request: web.Request) -> web.Response:
        if request.query.get("watch") in ("1", "true"):
            raise Refused(405, "MethodNotAllowed", "the double does not implement watch")
        self._authorize(request, "pods", "list")
        ns = request.match_info["ns"]
        selector = request.query.get("labelSelector", "")
        items = [
            self._render(pns, p)
            for (pns, _), p in list(self.pods.items())
            if pns == ns and _selector_matches(selector, p.labels)
        ]
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})

    async def _delete_pod(self, request: web.Request) -> web.Response:
        self._authorize(request, "pods", "delete")
        ns, pod = self._find(request)
        with self._lock:
            self.pods.pop((ns, pod.name), None)
        await asyncio.get_running_loop().run_in_executor(None, self._remove_container, pod)
        body = self._render(ns, pod)
        body["metadata"]["deletionTimestamp"] = _now()
        return web.json_response(body)

    def _remove_container(self, pod: _Pod) -> None:
        if pod.container_id:
            try:
                self.docker.api.remove_container(pod.container_id, force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as e:
                if "already in progress" not in str(e):
                    raise

    def evict(self, namespace: str, name: str) -> str:
        """What the kubelet does under node pressure: kill the pod, mark it Failed/Evicted.
        Returns what the sandbox's error must then name (a regular expression)."""
        pod = self.pods[(namespace, name)]
        pod.failed = ("Evicted", "The node was low on resource: memory.")
        self._remove_container(pod)
        return "Evicted"

    # ---------------------------------------- what the tests ask (as of tests/k8s_real.py)
    def pod_exists(self, namespace: str, name: str) -> bool:
        """The pod is in the API, or its container still exists."""
        pod = self.pods.get((namespace, name))
        if pod is not None:
            return True
        return bool(
            self.docker.api.containers(all=True, filters={"label": f"{POD_LABEL}={namespace}.{name}"})
        )

    def pod_labels(self, namespace: str, name: str) -> dict[str, str]:
        return dict(self.pods[(namespace, name)].labels)

    def verbs_used(self) -> set[tuple[str, str]] | None:
        """(resource, verb) pairs the sandbox user was authorized for."""
        return set(self.seen[SANDBOX_TOKEN])

    async def _create_policy(self, request: web.Request) -> web.Response:
        self._authorize(request, "networkpolicies", "create")
        body = await request.json()
        ns, name = request.match_info["ns"], body["metadata"]["name"]
        self.policies[(ns, name)] = body
        return web.json_response(body, status=201)

    # -------------------------------------------------------------- exec
    async def _exec(self, request: web.Request) -> web.StreamResponse:
        if request.method != "GET" or request.headers.get("Upgrade", "").lower() != "websocket":
            raise Refused(
                405, "MethodNotAllowed", "the double implements exec only as a websocket GET upgrade"
            )
        # A websocket exec is a GET, authorized as get and (Kubernetes >= 1.35) also create.
        self._authorize(request, "pods/exec", "get", "create")
        ns, pod = self._find(request)
        q = request.query
        if q.get("tty") in ("true", "1"):
            raise Refused(422, "Invalid", "the double does not implement tty exec")
        if "v4.channel.k8s.io" not in request.headers.get("Sec-WebSocket-Protocol", ""):
            raise Refused(400, "BadRequest", "the double speaks only v4.channel.k8s.io")
        command = q.getall("command", [])
        if (
            not command
            or q.get("container", pod.body["spec"]["containers"][0]["name"])
            != pod.body["spec"]["containers"][0]["name"]
        ):
            raise Refused(400, "BadRequest", "exec needs a command and an existing container")
        if self._render(ns, pod)["status"]["phase"] != "Running":
            raise Refused(
                400, "BadRequest", f"cannot exec in a container that is not running: pod {pod.name}"
            )
        loop = asyncio.get_running_loop()
        api = self.docker.api
        exec_id = await loop.run_in_executor(
            None,
            lambda: api.exec_create(
                pod.container_id,
                ["sh", "-c", EXEC_WRAPPER, "swerl-exec", *command],
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
            )["Id"],
        )
        dsock = await loop.run_in_executor(None, lambda: api.exec_start(exec_id, socket=True))
        raw = getattr(dsock, "_sock", dsock)
        ws = web.WebSocketResponse(protocols=("v4.channel.k8s.io",), max_msg_size=0)
        await ws.prepare(request)
        out: asyncio.Queue[bytes | None] = asyncio.Queue()
        threading.Thread(target=self._pump, args=(raw, out, loop), daemon=True).start()

        async def sender() -> None:
            while (frame := await out.get()) is not None:
                await ws.send_bytes(frame)
            info = await loop.run_in_executor(None, api.exec_inspect, exec_id)
            code = info.get("ExitCode") or 0
            if code == 0:
                status: dict[str, Any] = {"metadata": {}, "status": "Success"}
            else:
                status = {
                    "metadata": {},
                    "status": "Failure",
                    "message": f"command terminated with non-zero exit code: exit code {code}",
                    "reason": "NonZeroExitCode",
                    "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
                }
            await ws.send_bytes(b"\x03" + json.dumps(status).encode())
            await ws.close()

        send_task = asyncio.ensure_future(sender())
        try:
            async for msg in ws:
                if msg.type == WSMsgType.BINARY:
                    data = msg.data
                elif msg.type == WSMsgType.TEXT:
                    data = msg.data.encode()
                else:
                    break
                if data[:1] == b"\x00" and len(data) > 1:
                    await loop.run_in_executor(None, raw.sendall, data[1:])
        finally:
            try:
                raw.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            await send_task
            raw.close()
        return ws

    @staticmethod
    def _pump(raw: socket.socket, out: asyncio.Queue, loop: asyncio.AbstractEventLoop) -> None:
        """Docker's multiplexed exec stream -> channel-prefixed websocket frames."""
        buf = bytearray()
        try:
            while True:
                while len(buf) >= 8:
                    kind, size = struct.unpack(">BxxxL", buf[:8])
                    if len(buf) < 8 + size:
                        break
                    loop.call_soon_threadsafe(out.put_nowait, bytes([kind]) + bytes(buf[8 : 8 + size]))
                    del buf[: 8 + size]
                chunk = raw.recv(1 << 20)
                if not chunk:
                    break
                buf += chunk
        except OSError:
            pass
        finally:
            loop.call_soon_threadsafe(out.put_nowait, None)


SANDBOX_TOKEN = "swerl-sandboxes-token"
ADMIN_TOKEN = "admin-token"
NAMESPACE = "swerl-sandboxes"


def serve_double(docker_client: docker.DockerClient, tmp: Any) -> Any:
    """Generator for a session fixture: the double, the deny-network policy (recorded, not
    enforced), KUBECONFIG.

    The backend's kubeconfig user holds exactly the Role that KubeRay renders.
    """
    import os

    import yaml
    from kubernetes import client, config

    from swerl.cluster.kuberay import network_policy
    from swerl.sandbox.kubernetes import RBAC_RULES

    double = KubernetesAPIDouble(docker_client, rbac={SANDBOX_TOKEN: list(RBAC_RULES), ADMIN_TOKEN: None})
    double.start()
    try:
        admin = tmp / "admin.kubeconfig"
        admin.write_text(yaml.safe_dump(double.kubeconfig(ADMIN_TOKEN, NAMESPACE)))
        api = config.new_client_from_config(config_file=str(admin))
        client.NetworkingV1Api(api).create_namespaced_network_policy(NAMESPACE, network_policy(NAMESPACE))
        path = tmp / "kubeconfig"
        path.write_text(yaml.safe_dump(double.kubeconfig(SANDBOX_TOKEN, NAMESPACE)))
        old = os.environ.get("KUBECONFIG")
        os.environ["KUBECONFIG"] = str(path)
        try:
            yield double
        finally:
            if old is None:
                os.environ.pop("KUBECONFIG", None)
            else:
                os.environ["KUBECONFIG"] = old
    finally:
        double.stop()
