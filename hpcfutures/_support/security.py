"""Per-launch TLS credentials: who may talk to this launch's scheduler.

A launch's scheduler makes a fresh key and self-signed certificate when it
starts.  They reach the other processes only through the private address
exchange (the 0600 scheduler file, an MPI broadcast, or a pipe to local
workers), and Dask's TLS (``distributed.Security``) does the rest: a process
without them -- another user on a shared login node, a stray Dask client --
cannot even complete a connection.

An elliptic-curve key is used because it is made in about a millisecond,
where RSA would add a noticeable pause to every start.
"""

from __future__ import annotations

import datetime

__all__ = ["new_credentials"]

#: The name in the certificate; every process checks the peer against it.
NAME = "hpcfutures-launch"


def new_credentials(days: int = 30) -> dict[str, str]:
    """A fresh key and self-signed certificate, as PEM text, for one launch."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NAME)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(NAME)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return {
        "cert": cert.public_bytes(serialization.Encoding.PEM).decode(),
        "key": key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
    }
