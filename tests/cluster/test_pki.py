"""PKI and kubeconfig files (no cluster needed)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cryptography import x509

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

