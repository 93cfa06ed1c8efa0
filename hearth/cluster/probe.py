"""Is --address a Ray head? Asked before ray.init, which on a wrong address retries for minutes and
writes its C++ client's warnings to stderr ("Failed to connect to GCS at address ...", three lines
every 40 s) with no error of its own: a closed port or a server that is not Ray's GCS is one line here.

Ray's GCS is a gRPC server, and gRPC is HTTP/2: sent HTTP/2's client preface, it answers with its
own SETTINGS frame at once. An HTTP/1 server answers "HTTP/1.x 400" or closes; anything else that
listens says nothing. (No grpcio: Ray does not depend on it, and the preface is 33 bytes.)"""

from __future__ import annotations

import os
import socket

from hearth.errors import HearthError

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00" + b"\x04" + b"\x00" + b"\x00\x00\x00\x00"
"""The client's connection preface, then an empty SETTINGS frame (length 0, type 4, no flags, stream 0)."""
SETTINGS = 0x04
HOW_TO_JOIN = "give the HOST:PORT that `ray start --head` printed (port 6379 by default), or leave out --address " \
              "to start Ray on this machine"

REDIALED = "Ray replaces a loopback host by this machine's network address while RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER " \
           "is 1 (a head that listens on loopback only is reached with it 0)"


class NotARayHead(HearthError):
    """Nothing listens at --address, or what listens is not a Ray cluster's GCS."""


def check_ray_address(address: str, timeout_s: float = 5.0, dialed: str | None = None) -> None:
    """Raise NotARayHead unless `address` (HOST:PORT) answers as an HTTP/2 (gRPC) server, as Ray's
    GCS does. dialed: where ray.init will connect for it, probed in its place (Ray replaces a loopback
    host by this machine's network address: hearth.cluster.launch.ray_dials). 'auto' and ray:// (Ray
    Client) addresses are Ray's to resolve; with RAY_USE_TLS the GCS wants a TLS handshake first, so
    only its port is tried."""
    if address == "auto" or address.startswith("ray://"):
        return
    target = dialed or address
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise NotARayHead(f"--address {address!r}: give HOST:PORT of the Ray head (e.g. head-node:6379)")
    where, how = address, HOW_TO_JOIN
    if target != address:
        where = f"{address} (Ray dials {target} for it)"
        how = f"{REDIALED}, or {HOW_TO_JOIN}"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as s:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                return
            s.sendall(PREFACE)
            head = _read(s, 9)
    except OSError as e:
        raise NotARayHead(f"cannot reach a Ray cluster at {where}: {e.strerror or e}; {how}") from None
    if len(head) < 9 or head[3] != SETTINGS:
        said = "it answered, but not in Ray's gRPC protocol" if head else "it did not answer"
        raise NotARayHead(f"{where} is not a Ray cluster ({said}): {how}")


def _read(s: socket.socket, n: int) -> bytes:
    """Up to n bytes: fewer if the peer closes, none if it stays silent past the socket's timeout."""
    got = b""
    try:
        while len(got) < n and (chunk := s.recv(n - len(got))):
            got += chunk
    except TimeoutError:
        pass
    return got

