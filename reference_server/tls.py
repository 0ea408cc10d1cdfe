"""TLS for the reference server: check the certificate and key before serving, or make one.

``--tls-cert``/``--tls-key`` name PEM files; :func:`check_files` loads them once at
startup so a missing, unreadable, malformed, encrypted or mismatched file ends the
process with one line naming the file, not a traceback from inside uvicorn.
``--tls-self-signed`` makes a certificate for the loopback names (:func:`self_signed`)
in a temporary folder that lives as long as the server; the ``cryptography`` package
is imported only then.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from pathlib import Path

#: the names a self-signed certificate is valid for, besides the bound host
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
#: long enough for any soak; the certificate is remade at every start anyway
SELF_SIGNED_DAYS = 30


class TlsFileError(Exception):
    """A certificate or key file the server cannot use; ``str()`` is the whole message."""


class _EncryptedKey(Exception):
    pass


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key's password.
    raise _EncryptedKey


def check_files(cert: str, key: str) -> ssl.SSLContext:
    """A server context with ``cert`` and ``key`` loaded; raises :class:`TlsFileError` naming the file."""
    for flag, path in (("--tls-cert", cert), ("--tls-key", key)):
        try:
            Path(path).read_bytes()
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise TlsFileError(f"{flag} {path}: cannot read the file: {reason}.") from None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=cert)
    except ssl.SSLError:
        raise TlsFileError(
            f"--tls-cert {cert}: expected a PEM certificate "
            "(-----BEGIN CERTIFICATE-----), found none."
        ) from None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(cert, key, password=_no_password)
    except _EncryptedKey:
        raise TlsFileError(
            f"--tls-key {key}: the private key is encrypted; give an unencrypted "
            "PEM key (e.g. openssl pkey -in KEY -out PLAIN.pem)."
        ) from None
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise TlsFileError(
                f"--tls-key {key}: this private key does not belong to the "
                f"certificate in --tls-cert {cert}."
            ) from None
        raise TlsFileError(
            f"--tls-key {key}: expected a PEM private key "
            "(-----BEGIN PRIVATE KEY-----), found none."
        ) from None
    return ctx


def self_signed(folder: Path, host: str) -> tuple[str, str]:
    """Write a self-signed certificate and its key for the loopback names (and ``host``).

    Returns (certificate path, key path). An EC P-256 key: made in milliseconds, where
    an RSA key would add a noticeable pause to every server start.
    """
    # Imported here, each of them: only --tls-self-signed needs cryptography, which is slow
    # to import (tens of milliseconds) for every other server start.
    from cryptography import x509  # deferred: see above
    from cryptography.hazmat.primitives import hashes, serialization  # deferred
    from cryptography.hazmat.primitives.asymmetric import ec  # deferred
    from cryptography.x509.oid import NameOID  # deferred

    names: list[x509.GeneralName] = []
    for name in dict.fromkeys((*LOOPBACK_NAMES, host.strip("[]"))):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            names.append(x509.DNSName(name))
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "loopbench reference server")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path = folder / "cert.pem"
    key_path = folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    # Owner-only before the key is written into it.
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return str(cert_path), str(key_path)
