"""The Jupyter messages of a call from the grader (qkv.wire), read and written by hand on both sides: a request is
recognised among the kernel's shell messages by its type, a message's signature is checked as jupyter_client's
Session checks it (its dates left as text), and the writes a call makes to the kernel's output streams are counted,
so that the kernel announces its output only when there is some.
"""
import contextlib
import json

REQUEST_TYPE = "qkv_wire_request"  # the shell message a request travels in (never a cell), answered by wire.answer
REPLY_TYPE = "qkv_wire_reply"      # its answer, on the shell channel too


def own_request(session, msg):
    """(identities, the message) if `msg` (raw frames) is a signed REQUEST_TYPE message, else None."""
    try:
        idents, frames = session.feed_identities(msg, copy=False)
        header = frames[1] if isinstance(frames[1], bytes) else frames[1].bytes
        if REQUEST_TYPE.encode() not in header or json.loads(header).get("msg_type") != REQUEST_TYPE:
            return None  # (its header only, unchecked: ipykernel checks and reads the whole message itself)
        return idents, signed_message(session, frames)
    except Exception:  # not a message this can read: ipykernel's to handle (and to report)
        return None


def signed_message(session, frames):
    """The message in `frames` (its signature, header, parent header, metadata and content, the identities before
    them taken off), its signature checked and kept against a replay as jupyter_client's Session.deserialize does,
    but its dates left as text: parsing them was a fifth of the CPU a call's reply took to read. ValueError for a
    message unsigned, replayed or forged; whatever the parts hold, they are only JSON data."""
    frames = [part if isinstance(part, bytes) else part.bytes for part in frames[:5]]
    if len(frames) < 5:
        raise ValueError("a message has at least five parts")
    if session.auth is not None:
        import hmac

        signature = frames[0]
        if not signature or signature in session.digest_history or \
                not hmac.compare_digest(signature, session.sign(frames[1:5])):
            raise ValueError("an unsigned, replayed or forged message")
        session._add_digest(signature)
    header, parent, metadata, content = parts = [session.unpack(part) for part in frames[1:5]]
    if not all(isinstance(part, dict) for part in parts):
        raise ValueError("a message's header, parent header, metadata and content are JSON objects")
    return {"header": header, "msg_id": header["msg_id"], "msg_type": header["msg_type"], "parent_header": parent,
            "metadata": metadata, "content": content, "buffers": []}


def shell_socket(kernel):
    """Where ipykernel sends a main-shell reply (its shell channel thread's socket when it has subshells)."""
    if getattr(kernel, "_supports_kernel_subshells", False):
        return kernel.shell_channel_thread.manager.get_subshell_to_shell_channel_socket(None)
    return kernel.shell_stream


@contextlib.contextmanager
def writes_counted():
    """Count the writes to this kernel's output streams (sys.stdout and sys.stderr as they are now, however the
    student's code reaches them); a stream that cannot be watched counts as written to. Each stream is left with the
    write it had (a student's own, set on the stream, included)."""
    import sys

    count = [0]
    watched = []
    for stream in {id(s): s for s in (sys.stdout, sys.stderr) if s is not None}.values():
        try:
            own = vars(stream).get("write", _NONE)
            stream.write = _counting(stream.write, count)
            watched.append((stream, own))
        except (AttributeError, TypeError):
            count[0] += 1
    try:
        yield count
    finally:
        for stream, own in watched:
            try:
                if own is _NONE:
                    del stream.write
                else:
                    stream.write = own
            except (AttributeError, TypeError):
                count[0] += 1


_NONE = object()  # a stream that had no write of its own


def _counting(write, count):
    def counted(text):
        count[0] += 1
        return write(text)
    return counted
