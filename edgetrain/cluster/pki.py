"""Control-plane PKI: a CA, the apiserver serving cert, client certs and service-account keys."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CERT_VALIDITY_DAYS = 365
SERVING_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
# 10.0.0.1 is the first address of --service-cluster-ip-range: the in-cluster `kubernetes` Service.
SERVING_IPS = ("127.0.0.1", "10.0.0.1")

# Client identities: file stem -> (CN, O). RBAC bootstrap policy knows the system:* users.
CLIENTS: dict[str, tuple[str, str | None]] = {
    "admin": ("edgetrain-admin", "system:masters"),
    "kube-controller-manager": ("system:kube-controller-manager", None),
    "kube-scheduler": ("system:kube-scheduler", None),
    "kwok": ("kwok-controller", "system:masters"),
    # The API server's identity towards kubelets (logs): what virtual nodes check.
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", "system:masters"),
}


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write via a temp file in the same directory and rename, so readers never see halves."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files in a PKI directory."""

    dir: Path

    @property
    def ca_crt(self) -> Path:
        """CA certificate (trusted by clients and used as --client-ca-file)."""
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        """CA private key (also the KCM cluster-signing key)."""
        return self.dir / "ca.key"

    @property
    def serving_crt(self) -> Path:
        """kube-apiserver serving certificate."""
        return self.dir / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        """kube-apiserver serving key."""
        return self.dir / "apiserver.key"

    @property
    def sa_key(self) -> Path:
        """Service-account token signing key."""
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        """Service-account token verification key."""
        return self.dir / "sa.pub"

    def client_crt(self, who: str) -> Path:
        """Client certificate of identity `who` (a key of CLIENTS)."""
        return self.dir / f"{who}.crt"

    def client_key(self, who: str) -> Path:
        """Client key of identity `who`."""
        return self.dir / f"{who}.key"

    def complete(self) -> bool:
        """True if every file exists (a previous run's PKI can be reused)."""
        files = [self.ca_crt, self.ca_key, self.serving_crt, self.serving_key, self.sa_key]
        files += [self.sa_pub]
        files += [self.client_crt(w) for w in CLIENTS] + [self.client_key(w) for w in CLIENTS]
        return all(f.exists() for f in files)


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    server: bool = False,
    client: bool = False,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        # Backdate: processes started right away must not see a not-yet-valid cert.
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=CERT_VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        builder = builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
    else:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True, key_encipherment=True, key_cert_sign=False,
                crl_sign=False, content_commitment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if server:
        if sans is None:
            sans = [x509.DNSName(n) for n in SERVING_DNS_NAMES]
            sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in SERVING_IPS]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write_pair(crt: Path, key_path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey,
                ) -> None:
    write_atomic(key_path, _key_pem(key))
    write_atomic(crt, cert.public_bytes(serialization.Encoding.PEM), mode=0o644)


def _serving_ips(crt: Path) -> set[str]:
    cert = x509.load_pem_x509_certificate(crt.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}


def ensure_pki(pki_dir: Path, service_ip: str = SERVING_IPS[1]) -> Pki:
    """Create the PKI under `pki_dir` unless a complete one serving `service_ip` (the
    `kubernetes` Service's ClusterIP) is already there."""
    pki = Pki(pki_dir)
    if pki.complete() and service_ip in _serving_ips(pki.serving_crt):
        return pki
    pki_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(pki_dir, 0o700)
    # ECDSA P-256: generation takes milliseconds, and every component accepts it.
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("edgetrain-local-ca")
    ca_cert = _issue(ca_name, ca_key, ca_name, ca_key, ca=True)
    serving_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in SERVING_DNS_NAMES]
    sans += [x509.IPAddress(ipaddress.ip_address(ip))
             for ip in dict.fromkeys([*SERVING_IPS, service_ip])]
    serving = _issue(_name("kube-apiserver"), serving_key, ca_name, ca_key, server=True,
                     sans=sans)
    _write_pair(pki.serving_crt, pki.serving_key, serving, serving_key)
    for who, (cn, org) in CLIENTS.items():
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(_name(cn, org), key, ca_name, ca_key, client=True)
        _write_pair(pki.client_crt(who), pki.client_key(who), cert, key)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write_atomic(pki.sa_key, _key_pem(sa_key))
    write_atomic(
        pki.sa_pub,
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
        mode=0o644,
    )
    # The CA goes last: complete() is then only true once everything it signed exists.
    _write_pair(pki.ca_crt, pki.ca_key, ca_cert, ca_key)
    return pki


def issue_serving_pair(name: str, ips: list[str], ca: Pki | None) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) serving `name` and `ips`: signed by the cluster CA when
    given (a kubelet's serving cert), else self-signed (a cluster whose CA we do not hold)."""
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(name)]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    subject = _name(name, "system:nodes")
    if ca is None:
        cert = _issue(subject, key, subject, key, server=True, sans=sans)
    else:
        ca_cert = x509.load_pem_x509_certificate(ca.ca_crt.read_bytes())
        ca_key = serialization.load_pem_private_key(ca.ca_key.read_bytes(), password=None)
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{ca.ca_key}: expected an ECDSA CA key")
        cert = _issue(subject, key, ca_cert.subject, ca_key, server=True, sans=sans)
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def issue_client_pair(ca: Pki, common_name: str, org: str | None) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) of a client identity signed by the cluster CA (a real
    kubelet's: CN=system:node:<name>, O=system:nodes)."""
    key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = x509.load_pem_x509_certificate(ca.ca_crt.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{ca.ca_key}: expected an ECDSA CA key")
    cert = _issue(_name(common_name, org), key, ca_cert.subject, ca_key, client=True)
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)
