"""The gate's process setup: private namespaces for tritonserver, and the gate's priority above it.

As root the gate moves into a private network namespace and a private mount namespace before it
starts tritonserver: tritonserver listens on the loopback of that namespace, which no other
process on the host can reach, and a fresh tmpfs on ``/dev/shm`` (mode 0700) holds the Python
stubs' IPC regions. Without root nothing is isolated and ``isolate`` says so.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket

CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
MS_REC, MS_PRIVATE = 0x4000, 1 << 18
PR_SET_PDEATHSIG = 1
#: The gate's nice value when it may raise its priority (root): it uses little CPU, but on a
#: saturated machine every request waits for it twice; above the model it adds less latency.
GATE_NICE = -5


def isolate() -> str:
    """Private network + mount namespace with a private /dev/shm; returns what was done."""
    if os.geteuid() != 0:
        return (
            "not isolated (needs root): tritonserver listens on private loopback ports other local "
            "users can reach, and its /dev/shm regions are in the host's /dev/shm"
        )
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    if libc.unshare(CLONE_NEWNET | CLONE_NEWNS) != 0:
        return f"not isolated: unshare failed (errno {ctypes.get_errno()})"
    loopback_up()
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return f"network isolated, but mount propagation could not be made private (errno {ctypes.get_errno()})"
    if libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", 0, b"mode=0700") != 0:
        return f"network isolated, but no private /dev/shm (errno {ctypes.get_errno()})"
    return "isolated: private network namespace (tritonserver unreachable from the host) and private /dev/shm"


def loopback_up() -> None:
    """``ip link set lo up`` without iproute2 (SIOCGIFFLAGS / SIOCSIFFLAGS)."""
    import fcntl
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, siocgifflags, request)[:18])[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH", b"lo", flags | iff_up))


def sigterm_when_parent_dies() -> None:
    """``preexec_fn`` of a child process: the kernel sends it SIGTERM when its parent dies."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def die_with_parent() -> None:
    """``preexec_fn`` of tritonserver: SIGTERM when the gate dies, normal priority (the gate runs above it)."""
    sigterm_when_parent_dies()
    if os.geteuid() == 0:
        os.setpriority(os.PRIO_PROCESS, 0, 0)


def raise_priority() -> None:
    """The gate's own process to ``GATE_NICE`` when it runs as root (else left as it is)."""
    if os.geteuid() == 0:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, GATE_NICE)
        except OSError:
            pass
