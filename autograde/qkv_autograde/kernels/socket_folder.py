"""The folder a sandboxed kernel's sockets and connection file are in, and how the grader reaches it.

Inside the sandbox SOCKET_FOLDER is a small tmpfs of the kernel's own (sandbox.Sandbox mounts it; for a kernel forked
from a template, its keeper does, kernel_template.py): the student can write to it but not past its cap, and on no
disk of the grader's. A kernel in its own network namespace cannot reach the grader's TCP ports, so it listens on
IPC sockets there; the grader reaches them through /proc (open_socket_folder), and closes what it opened with
close_quietly.
"""
import asyncio
import os
import time

SOCKET_FOLDER = "/run/qkv-kernel"  # where a kernel sees its sockets and connection file: a small tmpfs of its own


async def open_socket_folder(below, is_running, seconds=60):
    """An O_PATH descriptor of SOCKET_FOLDER as the sandboxed process below host pid `below` sees it (its own
    mount namespace), or None if it stops first. The grader reaches the kernel's sockets through
    /proc/self/fd/N/...: the folder is a tmpfs inside the sandbox, and the descriptor cannot come to mean another
    process's folder the way a reused pid could."""
    from qkv_autograde.kernels.student_kernel import process_tree

    own = os.readlink("/proc/self/ns/mnt")
    deadline = time.monotonic() + seconds
    while is_running() and time.monotonic() < deadline:
        for pid in process_tree(below):
            try:
                with open(f"/proc/{pid}/comm") as f:
                    started = f.read().strip() != "bwrap"  # bwrap itself is there before its command runs
                if started and os.readlink(f"/proc/{pid}/ns/mnt") != own:
                    return os.open(f"/proc/{pid}/root{SOCKET_FOLDER}", os.O_PATH | os.O_DIRECTORY)
            except OSError:
                continue
        await asyncio.sleep(0.01)
    return None


def close_quietly(fd):
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
