"""`swerl cluster kuberay`: the shipped configs render to valid manifests, and a missing file,
kubeconfig or API server is a clear message with exit 2 (bad input) or 3 (infrastructure)."""

from __future__ import annotations

import jsonschema
import pytest
import yaml
from test_kubernetes import RAYCLUSTER_SCHEMA, RAYJOB_SCHEMA, _validate_core

from swerl.cli import main
from swerl.cluster import kuberay
from swerl.config import CONFIGS_DIR, load_config
from swerl.errors import ConfigError


def _validate(docs: list[dict]) -> None:
    for doc in docs:
        if doc["apiVersion"] == "ray.io/v1":
            jsonschema.validate(doc, RAYCLUSTER_SCHEMA if doc["kind"] == "RayCluster" else RAYJOB_SCHEMA)
        else:
            _validate_core(doc)


@pytest.mark.parametrize("name", ["clusters/kuberay.yaml", "kuberay.yaml"])
def test_shipped_configs_render_valid_manifests_with_the_rollout(name, tmp_path, capsys):
    out = tmp_path / "m.yaml"
    assert main(["cluster", "kuberay", "render", str(CONFIGS_DIR / name), "-o", str(out)]) == 0
    docs = list(yaml.safe_load_all(out.read_text()))
    _validate(docs)
    assert [d["kind"] for d in docs][-3:] == ["ConfigMap", "RayCluster", "RayJob"]
    shipped = yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["rollout.yaml"])
    assert shipped == yaml.safe_load((CONFIGS_DIR / "kuberay.yaml").read_text())
    assert load_config(CONFIGS_DIR / "kuberay.yaml").backend.name == "kubernetes"


def test_render_by_name_in_configs(capsys):
    assert main(["cluster", "kuberay", "render", "clusters/kuberay"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    quota = next(d for d in docs if d["kind"] == "ResourceQuota")
    assert quota["metadata"]["namespace"] == "swerl-sandboxes" and quota["spec"]["hard"]["pods"] == "200"


def test_missing_or_bad_config_is_exit_2_with_a_message(tmp_path, capsys):
    assert main(["cluster", "kuberay", "render", str(tmp_path / "none.yaml")]) == 2
    err = capsys.readouterr().err
    assert "none.yaml does not exist" in err and "Traceback" not in err
    (tmp_path / "typo.yaml").write_text("kuberay:\n  workerz: 3\n")
    assert main(["cluster", "kuberay", "render", str(tmp_path / "typo.yaml")]) == 2
    assert "unknown kuberay settings: workerz" in capsys.readouterr().err
    (tmp_path / "missing-rollout.yaml").write_text("rollout: nope.yaml\n")
    with pytest.raises(ConfigError, match=r"cannot read the rollout config .*nope\.yaml"):
        kuberay.KubeRayConfig.load(tmp_path / "missing-rollout.yaml")


def test_no_kubeconfig_is_exit_3_with_a_message(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["cluster", "kuberay", "submit", "clusters/kuberay"]) == 3
    err = capsys.readouterr().err
    assert "no kubeconfig at ~/.kube/config" in err and "--kubeconfig" in err and "Traceback" not in err
    assert (
        main(["cluster", "kuberay", "submit", "clusters/kuberay", "--kubeconfig", str(tmp_path / "kc")]) == 3
    )
    assert f"no kubeconfig at {tmp_path / 'kc'}" in capsys.readouterr().err


def test_unreachable_api_server_is_exit_3(tmp_path, capsys):
    kc = tmp_path / "kc"
    kc.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    assert main(["cluster", "kuberay", "submit", "clusters/kuberay", "--kubeconfig", str(kc)]) == 3
    err = capsys.readouterr().err
    assert "cannot reach the Kubernetes API" in err and "127.0.0.1" in err and "Traceback" not in err
