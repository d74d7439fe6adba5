"""Kubernetes backend against KubernetesAPIDouble (tests/k8s_api_double.py), or a real
cluster with SWERL_K8S_REAL=/path/to/admin.kubeconfig (tests/k8s_real.py); KubeRay manifests.

The shared sandbox contract runs in test_sandbox_conformance.py; here: pod shape,
start failures as infra errors, cleanup, reaping, RBAC, grading, exec latency.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time

import jsonschema
import kubernetes_validate
import pytest
import yaml
from k8s_api_double import NAMESPACE, _policy_selects
from midcommand import fails_within, hold_stream_open

from swerl.cluster import kuberay
from swerl.errors import BackendUnavailable, ImageMissing, SandboxError
from swerl.sandbox import make_sandbox, reap
from swerl.sandbox.base import SandboxConfig
from swerl.sandbox.kubernetes import (
    NETWORK_LABEL,
    RBAC_RULES,
    KubernetesConfig,
    KubernetesSandbox,
    pod_manifest,
)

K8S_VERSION = "1.33"


@pytest.fixture
def k8s(kubernetes_api):
    return kubernetes_api


def _validate_core(doc: dict) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


# ------------------------------------------------------------------ pod shape
def test_pod_manifest_is_valid_and_locked_down():
    cfg = SandboxConfig(run_id="r-1", env={"A": "1"}, memory="512m", cpus=0.5, lifetime=7200)
    pod = pod_manifest("img:1", cfg, KubernetesConfig(node_selector={"pool": "sandbox"}), "swerl-abc")
    _validate_core(pod)
    spec, c = pod["spec"], pod["spec"]["containers"][0]
    assert pod["metadata"]["labels"]["swerl.owner"] == "swerl"
    assert pod["metadata"]["labels"]["swerl.run"] == "r-1"
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] == 7200
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert spec["nodeSelector"] == {"pool": "sandbox"}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": list(cfg.cap_add)}
    assert c["resources"]["limits"] == {"cpu": "500m", "memory": "512Mi"}
    assert c["resources"]["requests"] == {"cpu": "250m", "memory": "512Mi"}  # capped at the limit
    assert c["env"] == [{"name": "A", "value": "1"}]
    assert c["imagePullPolicy"] == "IfNotPresent" and c["command"][:2] == ["bash", "-c"]


def test_network_policy_isolates_sandboxes_unless_allowed():
    policy = kuberay.network_policy("ns")
    closed = pod_manifest("i", SandboxConfig(), KubernetesConfig(), "a")["metadata"]["labels"]
    opened = pod_manifest("i", SandboxConfig(network=True), KubernetesConfig(), "b")["metadata"]["labels"]
    assert _policy_selects(policy, closed) and not _policy_selects(policy, opened)
    assert not _policy_selects(policy, {"app": "ray"})


# ------------------------------------------------------------------ lifecycle
def test_pod_is_deleted_on_close_and_labelled(k8s, base_image, sandbox_config):
    sb = make_sandbox("kubernetes", base_image, sandbox_config)
    with sb:
        assert sb.backend == "kubernetes" and sb.alive
        labels = k8s.pod_labels(NAMESPACE, sb.name)
        assert labels["swerl.owner"] == "swerl" and labels["swerl.run"] == sandbox_config.run_id
        assert sb.execute("hostname; id -u").output == "sandbox\n0\n"
    assert not k8s.pod_exists(NAMESPACE, sb.name)


def test_a_pod_has_the_pod_network_and_says_whether_it_may(k8s, base_image, sandbox_config):
    """What Kubernetes gives, stated rather than promised: every pod has the cluster's
    pod network (swerl cannot take it away); a sandbox without network is labelled so
    the rendered NetworkPolicy isolates it where the CNI enforces NetworkPolicy."""
    for network in (False, True):
        with make_sandbox("kubernetes", base_image, sandbox_config.replace(network=network)) as sb:
            assert "eth0" in sb.execute("ls /sys/class/net").output.split()
            labels = k8s.pod_labels(NAMESPACE, sb.name)
            assert labels[NETWORK_LABEL] == ("allowed" if network else "none")
            policy = kuberay.network_policy(NAMESPACE)
            assert _policy_selects(policy, labels) is not network


_CAP_BITS = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6, "SETUID": 7}

_INSIDE = r"""
grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status
cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max
q=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null) && echo "$q $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)" || cat /sys/fs/cgroup/cpu.max
test -e /var/run/secrets/kubernetes.io/serviceaccount && echo token || echo no-token
id -u; hostname; echo "${KUBERNETES_SERVICE_HOST:+api-service-address}"
"""


def test_limits_and_lockdown_as_seen_inside_the_pod(k8s, base_image, sandbox_config):
    """What the container runtime applied, read from inside: capabilities bounded to
    ``cap_add``, no new privileges, a seccomp filter, the memory and cpu limits, no
    service account token, the user, the hostname, the kubelet's environment."""
    cfg = sandbox_config.replace(memory="512m", cpus=0.5)
    with make_sandbox("kubernetes", base_image, cfg) as sb:
        lines = sb.execute(_INSIDE, cwd="/").output.splitlines()
    status = dict(line.split(":\t") for line in lines[:4])
    caps = sum(1 << _CAP_BITS[c] for c in cfg.cap_add)
    assert int(status["CapEff"], 16) == caps and int(status["CapBnd"], 16) == caps
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2"  # 2: a seccomp filter
    assert lines[4] == str(512 * 1024**2)
    quota, period = lines[5].split()
    assert int(quota) / int(period) == 0.5
    # the kubelet gives every container the API service's address (no token to use it)
    assert lines[6:] == ["no-token", "0", "sandbox", "api-service-address"]
    with make_sandbox("kubernetes", base_image, sandbox_config.replace(user="1000:1000")) as sb:
        assert sb.execute("id -u; id -g").output == "1000\n1000\n"


def test_the_pod_ends_with_its_lifetime(k8s, base_image, sandbox_config):
    sb = make_sandbox("kubernetes", base_image, sandbox_config.replace(lifetime=3)).start()
    try:
        time.sleep(6)
        with pytest.raises(SandboxError, match=r"Succeeded|Failed|DeadlineExceeded|no longer exists"):
            sb.execute("echo still here")
    finally:
        sb.close()
    assert not k8s.pod_exists(NAMESPACE, sb.name)


def test_missing_image_is_image_missing_and_pod_is_deleted(k8s, sandbox_config):
    sb = make_sandbox("kubernetes", "swerl-test-no-such-image:never", sandbox_config)
    with pytest.raises(ImageMissing, match=r"ErrImagePull|ImagePullBackOff|ErrImageNeverPull"):
        sb.start()
    assert not k8s.pod_exists(NAMESPACE, sb.name)


def test_unschedulable_is_an_infra_error(k8s, base_image, sandbox_config):
    sb = KubernetesSandbox(base_image, sandbox_config.replace(cpus=10_000), cpu_request="10000")
    with pytest.raises(SandboxError, match=r"Unschedulable.*Insufficient cpu"):
        sb.start()
    assert not k8s.pod_exists(NAMESPACE, sb.name)


def test_eviction_breaks_the_channel_as_an_infra_error(k8s, base_image, sandbox_config):
    sb = make_sandbox("kubernetes", base_image, sandbox_config).start()
    try:
        says = k8s.evict(NAMESPACE, sb.name)
        with pytest.raises(SandboxError, match=says):
            sb.execute("sleep 5")
        assert not sb.alive
        with pytest.raises(SandboxError):
            sb.read_file("/etc/hostname")
    finally:
        sb.close()  # never raises the websocket's error, and deletes whatever is left
    assert not k8s.pod_exists(NAMESPACE, sb.name)


def test_a_pod_deleted_mid_command_fails_it_in_bounded_time_even_if_the_stream_stays_open(
    k8s, base_image, sandbox_config
):
    sb = make_sandbox("kubernetes", base_image, sandbox_config).start()
    try:
        sb._channel.probe_every = 0.5
        hold_stream_open(sb._channel, lambda: sb._stream.timeout)
        delete = functools.partial(sb._api.delete_namespaced_pod, sb.name, sb.namespace)
        fails_within(30, sb, delete, r"no longer exists|is being deleted")
    finally:
        sb.close()


def test_unreachable_api_is_backend_unavailable(tmp_path, base_image):
    path = tmp_path / "kubeconfig"
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(cfg))
    sb = KubernetesSandbox(base_image, SandboxConfig(), kubeconfig=str(path))
    with pytest.raises(BackendUnavailable):
        sb.start()


def test_numeric_users_only():
    from swerl.errors import ConfigError

    with pytest.raises(ConfigError, match="numeric user"):
        pod_manifest("i", SandboxConfig(user="nobody"), KubernetesConfig(), "x")
    spec = pod_manifest("i", SandboxConfig(user="1000:1000"), KubernetesConfig(), "x")["spec"]
    assert spec["securityContext"]["runAsUser"] == 1000


def test_reaper_deletes_a_runs_pods_only(k8s, base_image, sandbox_config):
    mine = sandbox_config.replace(run_id=f"{sandbox_config.run_id}-reap")
    a = make_sandbox("kubernetes", base_image, mine).start()
    # one of the run's parts (a runner's actor, a trainer's episode), as Docker's reaper finds
    b = make_sandbox("kubernetes", base_image, mine.replace(run_id=f"{mine.run_id}-a1")).start()
    other = make_sandbox("kubernetes", base_image, sandbox_config).start()
    try:
        assert reap("kubernetes", mine.run_id) == 2
        assert not k8s.pod_exists(NAMESPACE, a.name) and not k8s.pod_exists(NAMESPACE, b.name)
        assert other.execute("echo ok").output == "ok\n"
        with pytest.raises(SandboxError):  # a reaped sandbox's channel breaks as an infra error
            a.execute("echo gone")
    finally:
        for sb in (a, b, other):
            sb.close()
    assert not k8s.pod_exists(NAMESPACE, other.name)


# -------------------------------------------------------------------- grading
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["official", "strict"])
def test_grading_in_fresh_pods(k8s, task_images, run_id, mode):
    """Both grading paths run in pods (tests/grading_cheat.py)."""
    from grading_cheat import grades_gold_and_cheat

    from swerl.tasks.sources import load_tasks

    instance = load_tasks("swerl-mini")[0]
    grades_gold_and_cheat(
        instance, lambda image: make_sandbox("kubernetes", image, SandboxConfig(run_id=run_id)), mode
    )


# ---------------------------------------------------------------------- timing
def test_exec_latency_over_the_websocket(k8s, base_image, sandbox_config):
    """Reported, not asserted: per-command round trip through the API double's exec websocket."""
    timings = {}
    for backend in ("kubernetes", "docker"):
        with make_sandbox(backend, base_image, sandbox_config) as sb:
            for _ in range(20):
                sb.execute("true")
            samples = []
            for _ in range(200):
                t = time.perf_counter()
                sb.execute("true")
                samples.append(time.perf_counter() - t)
        samples.sort()
        timings[backend] = (statistics.median(samples) * 1e3, samples[int(0.95 * len(samples))] * 1e3)
    for backend, (p50, p95) in timings.items():
        print(f"\nexec latency {backend}: p50 {p50:.2f} ms, p95 {p95:.2f} ms (200 x `true`)")


# ----------------------------------------------------------------------- RBAC
def test_rbac_grants_exactly_what_the_backend_used(k8s, base_image, sandbox_config):
    """The API server enforces the Role (a missing verb fails the conformance run with 403);
    here every granted verb must also have been used (the double records them; a real
    API server's audit log shows them, given as $SWERL_K8S_REAL_AUDIT)."""
    with make_sandbox("kubernetes", base_image, sandbox_config) as sb:
        sb.execute("true")
    reap("kubernetes", "no-such-run")
    assert all(rule["apiGroups"] == [""] for rule in RBAC_RULES)
    role = next(d for d in kuberay.render(kuberay.KubeRayConfig()) if d["kind"] == "Role")
    assert role["rules"] == list(RBAC_RULES)
    used = k8s.verbs_used()
    if used is None:
        pytest.skip("no audit log of the real API server ($SWERL_K8S_REAL_AUDIT): the used verbs are unknown")
    granted = {(res, verb) for rule in RBAC_RULES for res in rule["resources"] for verb in rule["verbs"]}
    if getattr(k8s, "version", (1, 35)) < (1, 35):  # the exec upgrade is authorized as create from 1.35
        granted.discard(("pods/exec", "create"))
    assert used == granted


# -------------------------------------------------------------------- KubeRay
# A minimal schema written down from KubeRay's ray.io/v1 CRDs
# (ray-operator/config/crd/bases/ray.io_rayclusters.yaml and ray.io_rayjobs.yaml):
# only the fields swerl renders, closed to anything else; pod templates are then
# checked as core PodTemplates.
_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_META = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}, "labels": _STR_MAP},
}
_GROUP = {
    "rayStartParams": _STR_MAP,
    "template": {
        "type": "object",
        "properties": {"metadata": {"type": "object"}, "spec": {"type": "object"}},
    },
}
RAYCLUSTER_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "ray.io/v1"},
        "kind": {"const": "RayCluster"},
        "metadata": _META,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["headGroupSpec"],
            "properties": {
                "rayVersion": {"type": "string"},
                "headGroupSpec": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["template"],
                    "properties": {**_GROUP, "serviceType": {"type": "string"}},
                },
                "workerGroupSpecs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["groupName", "template"],
                        "properties": {
                            **_GROUP,
                            "groupName": {"type": "string"},
                            "replicas": {"type": "integer", "minimum": 0},
                            "minReplicas": {"type": "integer", "minimum": 0},
                            "maxReplicas": {"type": "integer", "minimum": 0},
                        },
                    },
                },
            },
        },
    },
}
RAYJOB_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "ray.io/v1"},
        "kind": {"const": "RayJob"},
        "metadata": _META,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "entrypoint": {"type": "string"},
                "clusterSelector": _STR_MAP,
                "submissionMode": {"enum": ["K8sJobMode", "HTTPMode", "InteractiveMode"]},
                "activeDeadlineSeconds": {"type": "integer"},
            },
        },
    },
}


def _config(tmp_path) -> kuberay.KubeRayConfig:
    rollout = tmp_path / "rollout.yaml"
    rollout.write_text("suite: swerl-mini\nbackend: kubernetes\n")
    (tmp_path / "cluster.yaml").write_text(
        yaml.safe_dump(
            {
                "kuberay": {
                    "name": "rl",
                    "namespace": "ray",
                    "sandbox_namespace": "sb",
                    "image": "registry.invalid/swerl:1",
                    "workers": 3,
                    "rollout": "rollout.yaml",
                    "sandbox_quota": {"pods": "100", "requests.cpu": "200"},
                }
            }
        )
    )
    return kuberay.KubeRayConfig.load(tmp_path / "cluster.yaml")


def test_rendered_manifests_validate_against_the_schemas(tmp_path):
    docs = kuberay.render(_config(tmp_path))
    kinds = [d["kind"] for d in docs]
    assert kinds == [
        "ServiceAccount", "Role", "RoleBinding", "NetworkPolicy", "ResourceQuota", "ConfigMap", "RayCluster", "RayJob",
    ]  # fmt: skip
    for doc in docs:
        if doc["apiVersion"] == "ray.io/v1":
            jsonschema.validate(doc, RAYCLUSTER_SCHEMA if doc["kind"] == "RayCluster" else RAYJOB_SCHEMA)
        else:
            _validate_core(doc)
    cluster = next(d for d in docs if d["kind"] == "RayCluster")["spec"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        _validate_core(
            {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": "t"},
                "template": group["template"],
            }
        )
        spec = group["template"]["spec"]
        assert spec["serviceAccountName"] == "rl-ray"
        env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
        assert env["SWERL_K8S_NAMESPACE"] == "sb"
        assert spec["volumes"][0]["configMap"]["name"] == "rl-rollout"
    assert cluster["workerGroupSpecs"][0]["replicas"] == 3
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    assert binding["metadata"]["namespace"] == "sb"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rl-ray", "namespace": "ray"}]
    job = next(d for d in docs if d["kind"] == "RayJob")["spec"]
    assert job["entrypoint"] == "swerl rollout /config/rollout.yaml"
    assert job["clusterSelector"] == {"ray.io/cluster": "rl"}
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    assert yaml.safe_load(cm["data"]["rollout.yaml"]) == {"suite": "swerl-mini", "backend": "kubernetes"}


def test_the_minimal_crd_schema_rejects_what_kuberay_would():
    job = kuberay.ray_job(kuberay.KubeRayConfig())
    job["spec"]["entrypiont"] = "typo"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(job, RAYJOB_SCHEMA)


def test_main_render_writes_yaml(tmp_path):
    out = tmp_path / "manifests.yaml"
    text = kuberay.main_render({"name": "x"}, str(out))
    assert out.read_text() == text
    assert [d["kind"] for d in yaml.safe_load_all(text)][-2:] == ["RayCluster", "RayJob"]


def test_cli_renders(tmp_path):
    from swerl.cli import main

    _config(tmp_path)
    out = tmp_path / "m.yaml"
    assert main(["cluster", "kuberay", "render", str(tmp_path / "cluster.yaml"), "-o", str(out)]) == 0
    assert "kind: RayJob" in out.read_text()


class _FakeDynamic:
    """Stands in for kubernetes.dynamic.DynamicClient in submit(): records the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.polls = 0
        self.resources = self

    def get(self, api_version: str, kind: str) -> _FakeDynamic._Res:
        return self._Res(self, kind)

    class _Res:
        def __init__(self, dyn: _FakeDynamic, kind: str) -> None:
            self.dyn, self.kind = dyn, kind

        def server_side_apply(self, body, namespace, field_manager, force_conflicts):
            assert field_manager == "swerl" and force_conflicts
            self.dyn.calls.append(("apply", self.kind))

        def delete(self, name, namespace):
            from kubernetes.client.exceptions import ApiException

            self.dyn.calls.append(("delete", self.kind))
            raise ApiException(status=404)

        def get(self, name, namespace):
            self.dyn.polls += 1
            job = "RUNNING" if self.dyn.polls < 3 else "SUCCEEDED"

            class _Obj:
                def to_dict(self):
                    return {"status": {"jobDeploymentStatus": "Running", "jobStatus": job}}

            return _Obj()


def test_submit_applies_everything_then_follows_the_job(monkeypatch):
    fake = _FakeDynamic()
    monkeypatch.setattr(kuberay, "_dynamic_client", lambda kubeconfig, context: fake)
    lines: list[str] = []
    status = kuberay.submit(kuberay.KubeRayConfig(), poll=0, log=lines.append)
    assert status["jobStatus"] == "SUCCEEDED"
    kinds = [k for op, k in fake.calls if op == "apply"]
    assert kinds == [d["kind"] for d in kuberay.render(kuberay.KubeRayConfig())]
    assert fake.calls.index(("delete", "RayJob")) < fake.calls.index(("apply", "RayJob"))
    assert any("job=SUCCEEDED" in line for line in lines)


def test_the_double_refuses_what_it_does_not_implement(k8s, k8s_double_only):
    import ssl
    import urllib.request

    req = urllib.request.Request(
        f"{k8s.url}/api/v1/namespaces/x/services", headers={"Authorization": "Bearer admin-token"}
    )
    tls = ssl.create_default_context(cadata=k8s.ca_pem.decode())
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, context=tls)
    assert e.value.code == 404 and b"does not implement GET" in e.value.read()


def _dropped(sent: object, kept: object, path: str = "") -> list[str]:
    """Paths of what was sent and is not in what the API server kept (pruned or changed)."""
    if isinstance(sent, dict):
        if not isinstance(kept, dict):
            return [path or "/"]
        return [p for k, v in sent.items() for p in _dropped(v, kept.get(k, _ABSENT), f"{path}.{k}")]
    if isinstance(sent, list):
        if not isinstance(kept, list) or len(kept) != len(sent):
            return [path]
        return [
            p for i, (s, k) in enumerate(zip(sent, kept, strict=True)) for p in _dropped(s, k, f"{path}[{i}]")
        ]
    return [] if str(sent) == str(kept) else [path]


_ABSENT = object()


def test_rendered_manifests_pass_a_real_api_servers_schema(k8s, tmp_path):
    """Server-side dry run of every rendered document on a real cluster: the API server's
    own validation (core types, and the KubeRay CRDs' OpenAPI schemas where installed),
    and nothing sent was pruned as unknown. The operator itself is not run."""
    if not hasattr(k8s, "api_client"):
        pytest.skip("needs a real API server ($SWERL_K8S_REAL): the double implements no dry run")
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    dyn = DynamicClient(k8s.api_client)
    cfg = dataclasses.replace(_config(tmp_path), namespace=NAMESPACE, sandbox_namespace=NAMESPACE)
    checked = []
    for doc in kuberay.render(cfg):
        try:
            res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        except ResourceNotFoundError:
            pytest.skip(f"{doc['apiVersion']} {doc['kind']} is not served: install the KubeRay CRDs")
        kept = res.create(body=doc, namespace=doc["metadata"].get("namespace"), dry_run="All").to_dict()
        body = {k: v for k, v in doc.items() if k != "metadata"}
        assert not _dropped(body, kept), (doc["kind"], _dropped(body, kept))
        checked.append(doc["kind"])
    assert checked[-2:] == ["RayCluster", "RayJob"]
