"""A throwaway CA and server certificate, so engram clients that insist on https can be tested.

Imported only when TLS is asked for: trustme pulls in cryptography, which costs more start-up time
than the whole plain-http server.
"""

from __future__ import annotations

import ssl
from pathlib import Path


def server_context(host: str, ca_out: Path) -> ssl.SSLContext:
    """Issue a certificate for host (plus localhost and 127.0.0.1), write the CA's PEM to ca_out."""
    import trustme  # its cryptography import costs the server's start-up without --tls

    names = ["localhost", "127.0.0.1", "::1"]
    if host and host not in names and host not in ("0.0.0.0", "::"):
        names.insert(0, host)
    authority = trustme.CA(organization_name="engram-sync-kit fake cloud")
    certificate = authority.issue_cert(*names)
    ca_out.parent.mkdir(parents=True, exist_ok=True)
    authority.cert_pem.write_to_path(str(ca_out))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    certificate.configure_cert(context)
    # No session tickets: no test resumes a session, and each ticket costs a handshake work and memory.
    context.num_tickets = 0  # type: ignore[attr-defined]  # Python 3.8+, not in typeshed
    return context
