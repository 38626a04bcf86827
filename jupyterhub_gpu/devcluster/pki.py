"""Certificates and keys of the local dev cluster, made with ``cryptography``.

Two CAs: the cluster CA signs the kube-apiserver serving cert and the admin client
cert (``O=system:masters``); a separate webhook CA (named ``kueue-ca``, as Kueue's
cert rotator expects) signs Kueue's webhook serving cert, so the Secret Kueue reads
never holds the cluster CA's key. A service-account key pair signs tokens.

Everything is RSA, keys PEM in the traditional (PKCS#1) encoding: Kueue's cert
rotator parses the webhook CA key with ``x509.ParsePKCS1PrivateKey``.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
LEAF_DAYS = 365
# Kueue's rotator replaces certs that expire within 90 days; renew well before that.
RENEW_BEFORE_DAYS = 120
LOOPBACK = ipaddress.IPv4Address("127.0.0.1")
APISERVER_DNS = ("localhost", "kubernetes", "kubernetes.default",
                 "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
WEBHOOK_CA_NAME = "kueue-ca"  # Kueue's rotator verifies its CA against this DNS name
# The admin client cert's user (its CN): the components and the admin kubeconfig.
ADMIN_USER = "jupyterhub-gpu-dev-admin"
KUBECONFIG_NAME = "jupyterhub-gpu-dev"


@dataclass(frozen=True)
class PkiPaths:
    """Where every PEM file of one PKI directory lives."""

    dir: Path

    def _p(self, name: str) -> Path:
        return self.dir / name

    ca_crt = property(lambda s: s._p("ca.crt"))
    ca_key = property(lambda s: s._p("ca.key"))
    apiserver_crt = property(lambda s: s._p("apiserver.crt"))
    apiserver_key = property(lambda s: s._p("apiserver.key"))
    admin_crt = property(lambda s: s._p("admin.crt"))
    admin_key = property(lambda s: s._p("admin.key"))
    sa_key = property(lambda s: s._p("sa.key"))
    sa_pub = property(lambda s: s._p("sa.pub"))
    webhook_ca_crt = property(lambda s: s._p("webhook-ca.crt"))
    webhook_ca_key = property(lambda s: s._p("webhook-ca.key"))
    webhook_crt = property(lambda s: s._p("webhook.crt"))
    webhook_key = property(lambda s: s._p("webhook.key"))

    def all(self) -> tuple[Path, ...]:
        return (self.ca_crt, self.ca_key, self.apiserver_crt, self.apiserver_key,
                self.admin_crt, self.admin_key, self.sa_key, self.sa_pub,
                self.webhook_ca_crt, self.webhook_ca_key, self.webhook_crt, self.webhook_key)


@dataclass(frozen=True)
class _Issued:
    cert: x509.Certificate
    key: rsa.RSAPrivateKey


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, key: rsa.RSAPrivateKey,
             days: int) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=days)))


def make_ca(cn: str, dns: tuple[str, ...] = ()) -> _Issued:
    key = _key()
    builder = _builder(_name(cn), _name(cn), key, CA_DAYS).add_extension(
        x509.BasicConstraints(ca=True, path_length=None), critical=True).add_extension(
        x509.KeyUsage(digital_signature=True, key_encipherment=True, key_cert_sign=True,
                      crl_sign=True, content_commitment=False, data_encipherment=False,
                      key_agreement=False, encipher_only=False, decipher_only=False),
        critical=True)
    if dns:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False)
    return _Issued(builder.sign(key, hashes.SHA256()), key)


def issue(ca: _Issued, cn: str, *, org: str | None = None, dns: tuple[str, ...] = (),
          ips: tuple[ipaddress.IPv4Address, ...] = (), server: bool = True) -> _Issued:
    """A leaf cert signed by ``ca``: a serving cert, or a client cert (server=False)."""
    key = _key()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = _builder(_name(cn, org), ca.cert.subject, key, LEAF_DAYS).add_extension(
        x509.BasicConstraints(ca=False, path_length=None), critical=True).add_extension(
        x509.ExtendedKeyUsage([usage]), critical=False)
    sans = [x509.DNSName(d) for d in dns] + [x509.IPAddress(i) for i in ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return _Issued(builder.sign(ca.key, hashes.SHA256()), key)


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    path.chmod(0o600 if private else 0o644)


def _write_pair(crt: Path, key: Path, issued: _Issued) -> None:
    _write(crt, cert_pem(issued.cert))
    _write(key, key_pem(issued.key), private=True)


def _fresh(paths: PkiPaths) -> bool:
    """True when every file exists and no leaf expires within RENEW_BEFORE_DAYS."""
    if not all(p.is_file() for p in paths.all()):
        return False
    limit = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=RENEW_BEFORE_DAYS)
    for crt in (paths.apiserver_crt, paths.admin_crt, paths.webhook_crt):
        try:
            cert = x509.load_pem_x509_certificate(crt.read_bytes())
        except ValueError:
            return False
        if cert.not_valid_after_utc < limit:
            return False
    return True


def generate(directory: Path, webhook_dns: tuple[str, ...] = (), force: bool = False) -> PkiPaths:
    """Create (or keep, when still valid) every cert and key under ``directory``.

    ``webhook_dns`` are extra DNS names of Kueue's webhook serving cert (besides the
    IP 127.0.0.1 and ``localhost``), e.g. the in-cluster service name Kueue checks.
    """
    paths = PkiPaths(directory)
    if not force and _fresh(paths):
        return paths
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    ca = make_ca("jupyterhub-gpu-dev-ca")
    _write_pair(paths.ca_crt, paths.ca_key, ca)
    _write_pair(paths.apiserver_crt, paths.apiserver_key,
                issue(ca, "kube-apiserver", dns=APISERVER_DNS, ips=(LOOPBACK,)))
    _write_pair(paths.admin_crt, paths.admin_key,
                issue(ca, ADMIN_USER, org="system:masters", server=False))
    sa = _key()
    _write(paths.sa_key, key_pem(sa), private=True)
    _write(paths.sa_pub, sa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    webhook_ca = make_ca(WEBHOOK_CA_NAME, dns=(WEBHOOK_CA_NAME,))
    _write_pair(paths.webhook_ca_crt, paths.webhook_ca_key, webhook_ca)
    _write_pair(paths.webhook_crt, paths.webhook_key,
                issue(webhook_ca, "kueue-webhook", dns=("localhost", *webhook_dns),
                      ips=(LOOPBACK,)))
    return paths


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig(server: str, paths: PkiPaths, name: str = KUBECONFIG_NAME,
               user: tuple[str, dict] | None = None) -> dict:
    """A kubeconfig with the CA embedded: for the admin client cert, or for ``user``
    (its name and credentials, e.g. ``("hub", {"token": ...})``)."""
    user_name, credentials = user or (f"{name}-admin", {
        "client-certificate-data": _b64(paths.admin_crt),
        "client-key-data": _b64(paths.admin_key)})
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {
            "server": server, "certificate-authority-data": _b64(paths.ca_crt)}}],
        "users": [{"name": user_name, "user": credentials}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": user_name}}],
        "current-context": name,
        "preferences": {},
    }


def write_kubeconfig(path: Path, server: str, paths: PkiPaths,
                     user: tuple[str, dict] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, yaml.safe_dump(kubeconfig(server, paths, user=user),
                                sort_keys=False).encode(), private=True)
    return path
