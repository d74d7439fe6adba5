"""Run a rollout on Kubernetes: a KubeRay RayCluster + RayJob, sandboxes as pods.

``render(KubeRayConfig(...))`` returns the manifests, ``to_yaml`` prints them,
``submit`` applies them and follows the RayJob. The Ray head and workers run the
rollout (default entrypoint ``swerl rollout /config/rollout.yaml``, the rollout
config mounted from a ConfigMap); each sandbox is a pod the workers create in
``sandbox_namespace`` through the kubernetes backend (``swerl.sandbox.kubernetes``).

Preconditions (checked by nobody but you):

- the KubeRay operator (ray.io/v1 CRDs: RayCluster, RayJob) is installed;
- the Ray image (``image``) has swerl installed with the ``kubernetes`` extra and a
  Ray version equal to ``ray_version``;
- the task images (``sweb.eval.<arch>.<instance id>``, with your registry prefix)
  are pullable by the nodes — or preloaded, with ``imagePullPolicy: IfNotPresent``;
  a pull failure is an infra error (ImageMissing), never a zero reward;
- both namespaces exist; give ``sandbox_namespace`` a ResourceQuota
  (``sandbox_quota``) sized to the sandboxes you expect (each requests
  ``SandboxConfig.cpus``/``memory`` unless lowered);
- the cluster's CNI enforces NetworkPolicy, or sandboxes get network access (the
  rendered policy denies all ingress and egress of sandbox pods);
- the kubelet's ``podPidsLimit`` is the only pids limit Kubernetes offers.

Auth: the Ray pods run as the rendered ServiceAccount; its token is mounted, so
the backend uses in-cluster config (``load_incluster_config``). A Role in the
sandbox namespace grants exactly ``swerl.sandbox.kubernetes.RBAC_RULES`` (pods:
create/get/list/delete, pods/exec: create/get) and a RoleBinding binds it to the
ServiceAccount. Sandbox pods themselves get no token
(``automountServiceAccountToken: false``). ``submit`` runs with your kubeconfig
and needs rights to create all of the rendered kinds.
"""

from __future__ import annotations

import copy
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TextIO

import yaml

from swerl.cluster.ray_jobs import entrypoint
from swerl.config import RolloutConfig, resolve_path
from swerl.errors import ConfigError, InfraError
from swerl.sandbox.base import OWNER_LABEL
from swerl.sandbox.kubernetes import NETWORK_LABEL, RBAC_RULES

CONFIG_MOUNT = "/config"
DEFAULT_ENTRYPOINT = entrypoint(f"{CONFIG_MOUNT}/rollout.yaml")
"""What ``swerl cluster ray submit`` runs too: ``swerl rollout /config/rollout.yaml``."""
TERMINAL_JOB_STATUS = {"SUCCEEDED", "FAILED", "STOPPED"}


def _default_ray_version() -> str:
    try:
        import ray

        return ray.__version__
    except ImportError:
        return "2.40.0"


@dataclass
class KubeRayConfig:
    """One rollout on KubeRay. Quantities are Kubernetes quantities ("4", "16Gi")."""

    name: str = "swerl-rollout"
    namespace: str = "swerl"
    sandbox_namespace: str = "swerl-sandboxes"
    image: str = "swerl:latest"
    ray_version: str = field(default_factory=_default_ray_version)
    image_pull_policy: str = "IfNotPresent"
    head_cpu: str = "2"
    head_memory: str = "8Gi"
    workers: int = 1
    max_workers: int | None = None
    worker_cpu: str = "4"
    worker_memory: str = "16Gi"
    entrypoint: str = DEFAULT_ENTRYPOINT
    rollout: dict[str, Any] | str | None = None
    """The rollout config (a dict, or a path to its YAML), shipped as a ConfigMap at /config."""
    env: dict[str, str] = field(default_factory=dict)
    sandbox_quota: dict[str, str] = field(default_factory=dict)
    """ResourceQuota ``hard`` for the sandbox namespace, e.g. {"pods": "200", "requests.cpu": "400"}."""
    ttl_seconds_after_finished: int = 3600

    @classmethod
    def load(cls, source: str | os.PathLike[str] | dict[str, Any]) -> KubeRayConfig:
        """From a dict or a YAML file (a path or a name in configs/): KubeRayConfig fields at the
        top level or under ``kuberay:``, or a rollout config (rendered with the default cluster)."""
        base = Path(".")
        if isinstance(source, dict):
            data = dict(source)
        else:
            path = resolve_path(source)
            base = path.parent
            try:
                data = yaml.safe_load(path.read_text()) or {}
            except (OSError, yaml.YAMLError) as e:
                raise ConfigError(f"cannot read the KubeRay config {path}: {e}") from None
            if not isinstance(data, dict):
                raise ConfigError(
                    f"{path}: expected a mapping of KubeRay settings, got {type(data).__name__}"
                )
        data = data.get("kuberay", data)
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown and set(data) <= set(RolloutConfig.model_fields):  # a rollout config, e.g. kuberay.yaml
            data, unknown = {"rollout": data}, set()
        if unknown:
            raise ConfigError(
                f"unknown kuberay settings: {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))};"
                " see configs/clusters/kuberay.yaml)"
            )
        cfg = cls(**data)
        if isinstance(cfg.rollout, str):
            path = Path(cfg.rollout) if Path(cfg.rollout).is_absolute() else base / cfg.rollout
            try:
                cfg.rollout = yaml.safe_load(path.read_text())
            except OSError as e:
                raise ConfigError(f"cannot read the rollout config {path}: {e}") from e
        return cfg

    @property
    def service_account(self) -> str:
        return f"{self.name}-ray"

    @property
    def configmap(self) -> str:
        return f"{self.name}-rollout"


def _meta(name: str, namespace: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "swerl"}, **extra}


def network_policy(namespace: str, name: str = "swerl-sandboxes-deny-network") -> dict[str, Any]:
    """Deny all ingress and egress of sandbox pods (unless their config allows network)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(name, namespace),
        "spec": {
            "podSelector": {
                "matchLabels": {OWNER_LABEL: "swerl"},
                "matchExpressions": [{"key": NETWORK_LABEL, "operator": "NotIn", "values": ["allowed"]}],
            },
            "policyTypes": ["Ingress", "Egress"],
        },
    }


def rbac(cfg: KubeRayConfig) -> list[dict[str, Any]]:
    """ServiceAccount for the Ray pods, and the Role/RoleBinding the sandbox backend needs."""
    role = f"{cfg.name}-sandboxes"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(cfg.service_account, cfg.namespace)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(role, cfg.sandbox_namespace),
            "rules": copy.deepcopy(list(RBAC_RULES)),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(role, cfg.sandbox_namespace),
            "subjects": [{"kind": "ServiceAccount", "name": cfg.service_account, "namespace": cfg.namespace}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        },
    ]


def _pod_template(cfg: KubeRayConfig, container: str, cpu: str, memory: str) -> dict[str, Any]:
    env = {"SWERL_K8S_NAMESPACE": cfg.sandbox_namespace, **cfg.env}
    c: dict[str, Any] = {
        "name": container,
        "image": cfg.image,
        "imagePullPolicy": cfg.image_pull_policy,
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}},
    }
    spec: dict[str, Any] = {"serviceAccountName": cfg.service_account, "containers": [c]}
    if cfg.rollout is not None:
        c["volumeMounts"] = [{"name": "rollout-config", "mountPath": CONFIG_MOUNT, "readOnly": True}]
        spec["volumes"] = [{"name": "rollout-config", "configMap": {"name": cfg.configmap}}]
    return {"metadata": {"labels": {"app.kubernetes.io/part-of": "swerl"}}, "spec": spec}


def ray_cluster(cfg: KubeRayConfig) -> dict[str, Any]:
    workers = max(0, int(cfg.workers))
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": _meta(cfg.name, cfg.namespace),
        "spec": {
            "rayVersion": cfg.ray_version,
            "headGroupSpec": {
                "rayStartParams": {"dashboard-host": "0.0.0.0"},
                "template": _pod_template(cfg, "ray-head", cfg.head_cpu, cfg.head_memory),
            },
            "workerGroupSpecs": [
                {
                    "groupName": "workers",
                    "replicas": workers,
                    "minReplicas": workers,
                    "maxReplicas": max(workers, cfg.max_workers or workers),
                    "rayStartParams": {},
                    "template": _pod_template(cfg, "ray-worker", cfg.worker_cpu, cfg.worker_memory),
                }
            ],
        },
    }


def ray_job(cfg: KubeRayConfig) -> dict[str, Any]:
    """The job, submitted to the rendered RayCluster (which outlives it, for reuse)."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": _meta(cfg.name, cfg.namespace),
        "spec": {
            "entrypoint": cfg.entrypoint,
            "clusterSelector": {"ray.io/cluster": cfg.name},
            "submissionMode": "K8sJobMode",
        },
    }


def render(cfg: KubeRayConfig) -> list[dict[str, Any]]:
    """Every manifest of a rollout, in apply order."""
    docs = [*rbac(cfg), network_policy(cfg.sandbox_namespace)]
    if cfg.sandbox_quota:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": _meta("swerl-sandboxes", cfg.sandbox_namespace),
                "spec": {"hard": dict(cfg.sandbox_quota)},
            }
        )
    if cfg.rollout is not None:
        data = cfg.rollout if isinstance(cfg.rollout, str) else yaml.safe_dump(cfg.rollout, sort_keys=False)
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": _meta(cfg.configmap, cfg.namespace),
                "data": {"rollout.yaml": data},
            }
        )
    return [*docs, ray_cluster(cfg), ray_job(cfg)]


def to_yaml(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)


# ------------------------------------------------------------------ submit
def _dynamic_client(kubeconfig: str | None, context: str | None) -> Any:
    """A client of the cluster API; no kubeconfig or no API server is InfraError (exit 3)."""
    try:
        from kubernetes import config, dynamic
        from kubernetes.client import ApiClient
        from kubernetes.config.config_exception import ConfigException
    except ImportError as e:
        raise InfraError(
            f"the kubernetes client is not installed ({e}): pip install 'swerl[kubernetes]'"
        ) from e
    in_cluster = not (kubeconfig or context) and os.environ.get("KUBERNETES_SERVICE_HOST")
    where = (
        "in-cluster config" if in_cluster else kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    )
    if not in_cluster and not any(Path(p).expanduser().is_file() for p in where.split(os.pathsep)):
        raise InfraError(
            f"no kubeconfig at {where}: pass --kubeconfig FILE, set KUBECONFIG, or run in the cluster"
        )
    try:
        if in_cluster:
            config.load_incluster_config()
            api = ApiClient()
        else:
            api = config.new_client_from_config(config_file=where, context=context)
        return dynamic.DynamicClient(api)  # asks the server for its API groups
    except ConfigException as e:
        raise InfraError(f"kubeconfig {where}: {e}") from None
    except Exception as e:  # urllib3's errors: no API server there
        raise InfraError(f"cannot reach the Kubernetes API ({where}): {type(e).__name__}: {e}") from None


def submit(
    cfg: KubeRayConfig,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    follow: bool = True,
    timeout: float | None = None,
    poll: float = 5.0,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Apply the manifests (server-side apply; the RayJob is recreated) and follow the job.

    Returns the RayJob's last status (``jobStatus``: SUCCEEDED, FAILED, ...).
    """
    dyn = _dynamic_client(kubeconfig, context)  # first: no kubernetes extra is exit 3, not a traceback
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    for doc in render(cfg):
        ns, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
        try:
            res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        except ResourceNotFoundError:
            raise InfraError(
                f"the cluster has no {doc['apiVersion']} {doc['kind']} (is the KubeRay operator installed?)"
            ) from None
        try:
            if doc["kind"] == "RayJob":  # a finished job does not rerun on apply: make a new one
                try:
                    res.delete(name=name, namespace=ns)
                    log(f"deleted the previous RayJob {ns}/{name}")
                    _wait_gone(res, name, ns)
                except ApiException as e:
                    if e.status != 404:
                        raise
            res.server_side_apply(body=doc, namespace=ns, field_manager="swerl", force_conflicts=True)
        except ApiException as e:
            raise InfraError(f"cannot apply {doc['kind']} {ns}/{name}: {e.status} {e.reason}") from None
        log(f"applied {doc['kind']} {ns}/{name}")
    if not follow:
        return {}
    return follow_job(dyn, cfg, timeout=timeout, poll=poll, log=log)


def _wait_gone(res: Any, name: str, ns: str, timeout: float = 120.0) -> None:
    from kubernetes.client.exceptions import ApiException

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            res.get(name=name, namespace=ns)
        except ApiException as e:
            if e.status == 404:
                return
            raise
        time.sleep(1.0)


def follow_job(
    dyn: Any, cfg: KubeRayConfig, *, timeout: float | None, poll: float, log: Callable[[str], None]
) -> dict[str, Any]:
    res = dyn.resources.get(api_version="ray.io/v1", kind="RayJob")
    end = None if timeout is None else time.monotonic() + timeout
    last = None
    while True:
        status = (res.get(name=cfg.name, namespace=cfg.namespace).to_dict().get("status")) or {}
        now = (status.get("jobDeploymentStatus"), status.get("jobStatus"))
        if now != last:
            log(f"RayJob {cfg.namespace}/{cfg.name}: deployment={now[0]} job={now[1]}")
            last = now
        if status.get("jobStatus") in TERMINAL_JOB_STATUS or status.get("jobDeploymentStatus") == "Failed":
            return status
        if end is not None and time.monotonic() > end:
            return status
        time.sleep(poll)


# ------------------------------------------------------------ CLI entry points
def main_render(source: str | os.PathLike[str] | dict[str, Any], out: str | TextIO | None = None) -> str:
    """``swerl cluster kuberay render CONFIG``: the manifests as YAML, to ``out`` (path, file, "-")."""
    text = to_yaml(render(KubeRayConfig.load(source)))
    if out == "-":
        sys.stdout.write(text)
    elif isinstance(out, str):
        Path(out).write_text(text)
    elif out is not None:
        out.write(text)
    return text


def main_submit(
    source: str | os.PathLike[str] | dict[str, Any],
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    follow: bool = True,
    timeout: float | None = None,
) -> int:
    """``swerl cluster kuberay submit CONFIG``: exit code 0 when the job succeeded (or was submitted)."""
    status = submit(
        KubeRayConfig.load(source), kubeconfig=kubeconfig, context=context, follow=follow, timeout=timeout
    )
    return 0 if not follow or status.get("jobStatus") == "SUCCEEDED" else 1


def _cmd_render(args: Any) -> int:
    main_render(args.config, args.out)
    return 0


def add_cli(parser: Any) -> None:
    """``swerl cluster kuberay render|submit CONFIG`` (registered by ``swerl.cli``)."""
    sub = parser.add_subparsers(dest="kuberay_command", required=True)
    p = sub.add_parser("render", help="print the RayCluster, RayJob, RBAC and NetworkPolicy manifests")
    p.add_argument("config", help="KubeRay YAML (KubeRayConfig fields, top level or under kuberay:)")
    p.add_argument("-o", "--out", default="-", help="output file (default: stdout)")
    p.set_defaults(func=_cmd_render)
    p = sub.add_parser("submit", help="apply the manifests and follow the RayJob")
    p.add_argument("config")
    p.add_argument("--kubeconfig", default=None)
    p.add_argument("--context", default=None)
    p.add_argument("--no-follow", action="store_true", help="return once applied")
    p.add_argument("--timeout", type=float, default=None, help="stop following after SECONDS")
    p.set_defaults(
        func=lambda a: main_submit(
            a.config, kubeconfig=a.kubeconfig, context=a.context, follow=not a.no_follow, timeout=a.timeout
        )
    )
