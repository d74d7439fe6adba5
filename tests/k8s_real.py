"""The kubernetes backend's tests against a REAL cluster: ``SWERL_K8S_REAL=/path/to/admin.kubeconfig``.

Without it the tests run against tests/k8s_api_double.py. With it, the session fixture
sets up what a KubeRay deployment would: the sandbox namespace, a user holding exactly
the Role swerl renders (``RBAC_RULES``, bound by a RoleBinding), and ``KUBECONFIG``
pointing at that user. The user is a client certificate signed through the cluster's
own CertificateSigningRequest API (the admin approves it), so this needs no access
to the cluster's CA key and works on any cluster whose admin may approve CSRs.

The images the tests use (the swerl base image, the swerl-mini task images) must be
on the node already (``imagePullPolicy: IfNotPresent``): e.g. ``k8s-real.sh load IMAGE``.
``SWERL_K8S_REAL_AUDIT=/path/to/audit.log`` (the API server's audit log, Metadata level)
lets the RBAC test check every granted verb was used.

The object here offers what the tests ask of the double: ``pod_exists``,
``pod_labels``, ``evict`` and ``verbs_used``.
"""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

ENV_REAL = "SWERL_K8S_REAL"
ENV_AUDIT = "SWERL_K8S_REAL_AUDIT"


class RealCluster:
    """A real API server, seen by an admin client (for the tests' own checks)."""

    def __init__(self, admin_kubeconfig: str, namespace: str) -> None:
        from kubernetes import client, config

        self.admin_kubeconfig = admin_kubeconfig
        self.namespace = namespace
        self.api_client = config.new_client_from_config(config_file=admin_kubeconfig)
        self.core = client.CoreV1Api(self.api_client)
        self.user = f"swerl-test-{uuid.uuid4().hex[:6]}"
        self.started = time.time()
        version = client.VersionApi(self.api_client).get_code()
        self.version = (int(version.major), int(version.minor.rstrip("+")))

    # ------------------------------------------------------------ setup
    def prepare(self, tmp: Path) -> Path:
        """Namespace, Role, RoleBinding and a client-certificate user: its kubeconfig path."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        from swerl.sandbox.kubernetes import RBAC_RULES

        try:
            self.core.create_namespace({"metadata": {"name": self.namespace}})
        except ApiException as e:
            if e.status != 409:
                raise
        rbac = client.RbacAuthorizationV1Api(self.api_client)
        role = {"metadata": {"name": self.user}, "rules": [dict(r) for r in RBAC_RULES]}
        rbac.create_namespaced_role(self.namespace, role)
        binding = {
            "metadata": {"name": self.user},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": self.user},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": self.user}],
        }
        rbac.create_namespaced_role_binding(self.namespace, binding)
        cert, key = self._client_certificate()
        admin = yaml.safe_load(Path(self.admin_kubeconfig).read_text())
        ctx = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
        cluster = next(c for c in admin["clusters"] if c["name"] == ctx["cluster"])
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [cluster],
            "users": [
                {
                    "name": self.user,
                    "user": {
                        "client-certificate-data": base64.b64encode(cert).decode(),
                        "client-key-data": base64.b64encode(key).decode(),
                    },
                }
            ],
            "contexts": [
                {
                    "name": "sandboxes",
                    "context": {"cluster": cluster["name"], "user": self.user, "namespace": self.namespace},
                }
            ],
            "current-context": "sandboxes",
        }
        path = tmp / "sandbox-user.kubeconfig"
        path.write_text(yaml.safe_dump(cfg))
        return path

    def _client_certificate(self) -> tuple[bytes, bytes]:
        """Key and certificate for ``self.user``, signed by the cluster through a CSR."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
        from kubernetes import client

        key = ec.generate_private_key(ec.SECP256R1())
        csr = (
            x509.CertificateSigningRequestBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.user)]))
            .sign(key, hashes.SHA256())
        )
        certs = client.CertificatesV1Api(self.api_client)
        body = {
            "metadata": {"name": self.user},
            "spec": {
                "request": base64.b64encode(csr.public_bytes(serialization.Encoding.PEM)).decode(),
                "signerName": "kubernetes.io/kube-apiserver-client",
                "usages": ["client auth"],
            },
        }
        certs.create_certificate_signing_request(body)
        obj = certs.read_certificate_signing_request(self.user)
        obj.status.conditions = [
            client.V1CertificateSigningRequestCondition(
                type="Approved", status="True", reason="SwerlTests", message="test user"
            )
        ]
        certs.replace_certificate_signing_request_approval(self.user, obj)
        for _ in range(300):
            issued = certs.read_certificate_signing_request(self.user).status.certificate
            if issued:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("the cluster did not sign the test user's certificate (is a signer running?)")
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return base64.b64decode(issued), key_pem

    def cleanup(self) -> None:
        from kubernetes import client

        from swerl.sandbox.kubernetes import reap

        reap(api=self.core, namespace=self.namespace)
        rbac = client.RbacAuthorizationV1Api(self.api_client)
        for delete in (
            lambda: rbac.delete_namespaced_role_binding(self.user, self.namespace),
            lambda: rbac.delete_namespaced_role(self.user, self.namespace),
            lambda: client.CertificatesV1Api(self.api_client).delete_certificate_signing_request(self.user),
        ):
            try:
                delete()
            except Exception as e:  # leave the rest to clean
                print(f"k8s_real cleanup: {e}")

    # ---------------------------------------------------- what the tests ask
    def pod_exists(self, namespace: str, name: str) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.read_namespaced_pod(name, namespace)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True

    def pod_labels(self, namespace: str, name: str) -> dict[str, str]:
        return dict(self.core.read_namespaced_pod(name, namespace).metadata.labels or {})

    def evict(self, namespace: str, name: str) -> str:
        """Evict the pod through the Eviction API (as a drain does). Returns what the
        sandbox's error must then name (a regular expression)."""
        version = "policy/v1" if self.version >= (1, 22) else "policy/v1beta1"
        body = {"apiVersion": version, "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        self.core.create_namespaced_pod_eviction(name, namespace, body)
        return r"no longer exists|is being deleted|pod \S+ is (Failed|Succeeded)"

    def verbs_used(self) -> set[tuple[str, str]] | None:
        """(resource, verb) pairs the test user sent since the session began, from the
        API server's audit log; None when no audit log was given."""
        path = os.environ.get(ENV_AUDIT)
        if not path:
            return None
        seen = set()
        for line in Path(path).read_text().splitlines():
            event = json.loads(line)
            if event.get("user", {}).get("username") != self.user:
                continue
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            seen.add((resource, event["verb"]))
        return seen


def serve_real(admin_kubeconfig: str, tmp: Path, namespace: str) -> Any:
    """Generator for the session fixture: the real cluster, KUBECONFIG = the sandbox user."""
    cluster = RealCluster(admin_kubeconfig, namespace)
    path = cluster.prepare(tmp)
    old = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(path)
    try:
        yield cluster
    finally:
        if old is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = old
        cluster.cleanup()
