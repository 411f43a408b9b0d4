"""A throwaway certificate authority for the dev stack's TLS listeners, made with the
``cryptography`` package: a CA, a broker certificate for localhost / 127.0.0.1, client
certificates (for mutual TLS), and the certificates the security tests need to see fail (one
from a CA nobody trusts, one expired, one for another host name). Keys are PEM, unencrypted,
readable by their owner only; they guard nothing but a loopback test broker."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from groupscope_dev.ports import LOOPBACK

BROKER_NAMES = ("localhost", LOOPBACK)
CLIENT_NAME = "groupscope"
_DAY = dt.timedelta(days=1)


@dataclass(frozen=True)
class Pair:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class DevTLS:
    """The files of one stack's TLS setup, under ``directory``."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def other_ca(self) -> Path:
        """A CA that signed nothing the broker shows: trusting only it must fail."""
        return self.directory / "other-ca.pem"

    @property
    def broker(self) -> Pair:
        return self._pair("broker")

    @property
    def misnamed_broker(self) -> Pair:
        """Signed by the CA, for a host name that is not the broker's."""
        return self._pair("misnamed-broker")

    @property
    def client(self) -> Pair:
        return self._pair("client")

    @property
    def expired_client(self) -> Pair:
        return self._pair("expired-client")

    def _pair(self, name: str) -> Pair:
        return Pair(self.directory / f"{name}.pem", self.directory / f"{name}.key")

    def broker_keystore(self, pair: Pair) -> Path:
        """Key and certificate chain in one PEM file, as Kafka's PEM keystore reads it."""
        return self.directory / f"{pair.cert.stem}-keystore.pem"

    def create(self, now: dt.datetime | None = None) -> DevTLS:
        """Writes every file, once (an existing CA is kept, so running brokers stay valid)."""
        if self.ca.exists():
            return self
        now = now or dt.datetime.now(dt.UTC)
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        ca_key, ca_cert = _authority("groupscope dev CA", now)
        _write(self.ca, ca_cert, None)
        _write(self.other_ca, _authority("groupscope untrusted CA", now)[1], None)
        issue = _Issuer(ca_key, ca_cert, now)
        for pair, cert_key in (
            (self.broker, issue("groupscope dev broker", BROKER_NAMES, server=True)),
            (self.misnamed_broker, issue("wrong.invalid", ("wrong.invalid",), server=True)),
            (self.client, issue(CLIENT_NAME, (), server=False)),
            (self.expired_client, issue(CLIENT_NAME, (), server=False, expired=True)),
        ):
            cert, key = cert_key
            _write(pair.cert, cert, None)
            _write(pair.key, None, key)
            if pair in (self.broker, self.misnamed_broker):
                _write(self.broker_keystore(pair), cert, key)
        return self


class _Issuer:
    def __init__(self, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate,
                 now: dt.datetime) -> None:
        self.ca_key, self.ca_cert, self.now = ca_key, ca_cert, now

    def __call__(self, common_name: str, names: tuple[str, ...], *, server: bool,
                 expired: bool = False) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        start, end = ((self.now - 30 * _DAY, self.now - _DAY) if expired
                      else (self.now - _DAY, self.now + 365 * _DAY))
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False)
        )
        if names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_general_name(n) for n in names]), critical=False)
        return builder.sign(self.ca_key, hashes.SHA256()), key


def _authority(name: str, now: dt.datetime
               ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _DAY).not_valid_after(now + 365 * _DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True,
            content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _write(path: Path, cert: x509.Certificate | None,
           key: ec.EllipticCurvePrivateKey | None) -> None:
    text = b""
    if key is not None:
        text += key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
    if cert is not None:
        text += cert.public_bytes(serialization.Encoding.PEM)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(text)
