"""check_ray_address against loopback listeners that are not Ray (no Ray started): one that answers
HTTP/2's preface as a gRPC server does passes; one that says nothing, or closes, is refused."""

from __future__ import annotations

import socket
import threading

import pytest

from hearth.cluster.probe import PREFACE, NotARayHead, check_ray_address

SERVER_SETTINGS = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # an empty SETTINGS frame, as a gRPC server sends first


def _listener(reply: bytes | None):
    """A one-connection server on a free loopback port: reads the preface, then sends `reply` and closes
    (None: says nothing and holds the connection until the test ends)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    got, done = [], threading.Event()

    def serve():
        conn, _ = s.accept()
        with conn:
            got.append(conn.recv(len(PREFACE), socket.MSG_WAITALL))
            if reply is None:
                done.wait(30)
            else:
                conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    return s, got, done


def test_an_http2_server_passes_and_was_sent_the_preface():
    s, got, done = _listener(SERVER_SETTINGS)
    with s:
        check_ray_address(f"127.0.0.1:{s.getsockname()[1]}", timeout_s=30)
    assert got == [PREFACE]


@pytest.mark.parametrize("reply, said", [(None, "it did not answer"), (b"", "it did not answer"),
                                         (b"SSH-2.0-OpenSSH_9.6\r\n", "it answered, but not in Ray's gRPC protocol")])
def test_a_listener_that_is_not_grpc_is_refused(reply, said):
    s, _, done = _listener(reply)
    try:
        with pytest.raises(NotARayHead, match=f"127.0.0.1:{s.getsockname()[1]} is not a Ray cluster \\({said}\\)"):
            check_ray_address(f"127.0.0.1:{s.getsockname()[1]}", timeout_s=0.5 if reply is None else 30)
    finally:
        done.set()
        s.close()


def test_the_address_ray_dials_is_probed_and_both_are_named():
    """Ray replaces a loopback --address by this machine's network address (unless its loopback switch is
    0): a head listening on loopback only then answers the address given but refuses the one Ray dials,
    and ray.init retried for ~12 minutes. The probe asks the dialed one."""
    s, _, done = _listener(SERVER_SETTINGS)
    with socket.socket() as closed:  # stands for this machine's address, where nothing listens
        closed.bind(("127.0.0.1", 0))
        dialed = f"127.0.0.1:{closed.getsockname()[1]}"
    given = f"127.0.0.1:{s.getsockname()[1]}"
    try:
        said = (f"^cannot reach a Ray cluster at {given} \\(Ray dials {dialed} for it\\): Connection refused; "
                "Ray replaces a loopback host .* RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
        with pytest.raises(NotARayHead, match=said):
            check_ray_address(given, timeout_s=30, dialed=dialed)
        check_ray_address(given, timeout_s=30, dialed=given)  # dialed as given: the listener answers
    finally:
        done.set()
        s.close()
