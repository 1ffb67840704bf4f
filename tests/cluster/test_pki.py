"""PKI and kubeconfig files (no cluster needed)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from cryptography import x509

from edgetrain.cluster.kubeconfig import KubeconfigError, load_kubeconfig, write_kubeconfig
from edgetrain.cluster.pki import ensure_pki


def test_pki_is_complete_reused_and_private(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path / "pki")
    assert pki.complete()
    assert (pki.ca_key.stat().st_mode & 0o777) == 0o600
    ca_before = pki.ca_crt.read_bytes()
    assert ensure_pki(tmp_path / "pki").ca_crt.read_bytes() == ca_before  # reused, not rotated
    serving = x509.load_pem_x509_certificate(pki.serving_crt.read_bytes())
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    admin = x509.load_pem_x509_certificate(pki.client_crt("admin").read_bytes())
    orgs = admin.subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)
    assert [o.value for o in orgs] == ["system:masters"]


def test_kubeconfig_round_trip(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path / "pki")
    path = write_kubeconfig(tmp_path / "kc", server="https://127.0.0.1:6443", ca_crt=pki.ca_crt,
                            client_crt=pki.client_crt("admin"),
                            client_key=pki.client_key("admin"), user="admin")
    cfg = load_kubeconfig(path)
    assert cfg.server == "https://127.0.0.1:6443"
    assert cfg.ca_pem == pki.ca_crt.read_bytes()
    assert cfg.client_key_pem == pki.client_key("admin").read_bytes()


def test_kubeconfig_with_exec_plugin_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "kc"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {exec: {command: aws}}}]\n"
    )
    with pytest.raises(KubeconfigError, match="exec/auth-provider"):
        load_kubeconfig(path)
