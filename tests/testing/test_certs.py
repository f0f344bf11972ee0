"""Certificates for the TLS tests, made at test time with the `openssl` command (Debian's
`openssl` package; tools/install-deps.sh installs it).

    certs = make_certs(directory)
    certs.ca, certs.server_cert, certs.server_key     # server cert: SAN localhost, 127.0.0.1
    certs.client_cert, certs.client_key               # signed by certs.ca (for mTLS)
    certs.other_ca                                    # an unrelated CA ("wrong CA")
    certs.other_client_cert, certs.other_client_key   # signed by other_ca
    certs.peer_cert, certs.peer_key                   # signed by certs.ca, SAN as the server
                                                      # cert, for serverAuth and clientAuth: a
                                                      # shard's own cert, presented to its peers

Every value is a file path. Keys are P-256 (fast to make), certificates valid for a day.
"""

import os
import subprocess
import types



def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _new_key(name, cwd):
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", name, cwd=cwd)


def _ca(name, cwd):
    _new_key(f"{name}.key", cwd)
    _openssl("req", "-new", "-x509", "-key", f"{name}.key", "-out", f"{name}.pem", "-days", "1",
             "-subj", f"/CN=tensorcompute test {name}", "-addext",
             "basicConstraints=critical,CA:TRUE", "-addext",
             "keyUsage=critical,keyCertSign,cRLSign", cwd=cwd)


def _leaf(name, ca, extensions, cwd):
    _new_key(f"{name}.key", cwd)
    _openssl("req", "-new", "-key", f"{name}.key", "-out", f"{name}.csr",
             "-subj", f"/CN={name}", cwd=cwd)
    with open(os.path.join(cwd, f"{name}.ext"), "w") as f:
        f.write(extensions)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "1", "-extfile", f"{name}.ext",
             cwd=cwd)


def make_certs(directory):
    """Makes the CAs, server and client certificates in `directory`; returns their paths."""
    _ca("ca", directory)
    _ca("other_ca", directory)
    _leaf("server", "ca", "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
          "subjectAltName=DNS:localhost,IP:127.0.0.1\n", directory)
    client_ext = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n"
    _leaf("peer", "ca", "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n"
          "subjectAltName=DNS:localhost,IP:127.0.0.1\n", directory)
    _leaf("client", "ca", client_ext, directory)
    _leaf("other_client", "other_ca", client_ext, directory)
    path = lambda name: os.path.join(directory, name)
    return types.SimpleNamespace(
        ca=path("ca.pem"), server_cert=path("server.pem"), server_key=path("server.key"),
        client_cert=path("client.pem"), client_key=path("client.key"),
        other_ca=path("other_ca.pem"), other_client_cert=path("other_client.pem"),
        other_client_key=path("other_client.key"), peer_cert=path("peer.pem"),
        peer_key=path("peer.key"))
