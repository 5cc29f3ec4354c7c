"""The grader's end of a kernel's sockets, bounded in what it will hold, whatever the kernel sends.

A kernel that prints 40 MiB per call publishes 40 MiB messages faster than the grader can read them: jupyter_client
reads each one whole, and ZeroMQ queues up to a thousand of them in the grader's socket, so the grading process grew
past 1 GiB before `BoundedOutputClient` could cut the text. Here the sockets themselves refuse: a message larger than
the largest answer the wire accepts is dropped by ZeroMQ before it is read (it closes that connection for good: a
protocol error is never reconnected), and only a few messages wait in the grader's queue; the rest wait in the
kernel's own memory, which its sandbox bounds. Each closed connection is counted, so the report can name it, and
replaced by a new one, so the kernel is heard again.
"""
import zmq
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_core.utils import run_sync

from qkv import wire

# the largest message accepted: an answer at the wire's own limit, with room for the message's header and metadata
MESSAGE_BYTES = wire.REPLY_LIMITS.text_chars + (1 << 20)
QUEUED_MESSAGES = 4  # per socket; the kernel is slowed down (or drops, once its own queue is full), never the grader


class BoundedKernelClient(AsyncKernelClient):
    """A kernel client whose sockets accept messages of at most MESSAGE_BYTES and queue at most QUEUED_MESSAGES.

    ZeroMQ does not reconnect a connection it dropped for a message too large, so `reconnect_refused()` gives the
    channel a new socket (and says how many messages were refused), and later cells are heard again."""

    MONITORED = ("iopub", "shell")  # the channels a kernel answers on; a dropped message there is named

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._monitors = {}  # channel -> (its monitor socket, the same socket read without an event loop)
        self._dropped = {}   # channel -> disconnections seen by `dropped` and not yet reconnected
        self.silent_next_cell = False

    def execute(self, code, *args, **kwargs):
        """jupyter_client's execute; silent when `silent_next_cell` is set (the grader's own set-up, such as
        qkv.wire.answer: the kernel counts only the notebook's cells, so the feedback page numbers them In [1] ...)."""
        if self.silent_next_cell:
            self.silent_next_cell = False
            kwargs["silent"] = True
        return super().execute(code, *args, **kwargs)

    def _context_default(self):
        context = super()._context_default()
        # defaults for every socket of this client's own context, so they hold from the first connection on
        context.setsockopt(zmq.MAXMSGSIZE, MESSAGE_BYTES)
        context.setsockopt(zmq.RCVHWM, QUEUED_MESSAGES)
        return context

    def _create_connected_socket(self, channel, identity=None):
        socket = super()._create_connected_socket(channel, identity)
        if channel in self.MONITORED:
            self._close_monitor(channel)
            monitor = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            # read without an event loop: the asyncio socket's twin on the same ZeroMQ socket
            self._monitors[channel] = (monitor, zmq.Socket.shadow(monitor.underlying))
        return socket

    def _close_monitor(self, channel):
        monitor, _ = self._monitors.pop(channel, (None, None))
        if monitor is not None:
            try:
                monitor.close(linger=0)
            except zmq.ZMQError:
                pass

    def _disconnections(self, channel):
        _, events = self._monitors.get(channel, (None, None))
        count = 0
        try:
            while events is not None and events.poll(0):
                events.recv_multipart()
                count += 1
        except zmq.ZMQError:  # the context is closing
            pass
        return count

    def dropped(self, channel):
        """Whether `channel`'s connection was dropped since it was last connected: no message will come on it again
        until reconnect_refused (which still counts the drop)."""
        self._dropped[channel] = self._dropped.get(channel, 0) + self._disconnections(channel)
        return self._dropped[channel] > 0

    def reconnect_refused(self):
        """Messages refused as too large since the last call (a kernel that stays alive does not otherwise drop its
        connections); each channel that dropped one is connected again, and the kernel's answers heard again."""
        refused = 0
        for channel in self.MONITORED:
            dropped = self._dropped.pop(channel, 0) + self._disconnections(channel)
            if dropped:
                refused += dropped
                old = getattr(self, f"_{channel}_channel")
                setattr(self, f"_{channel}_channel", None)
                if old is not None:
                    old.stop()
                getattr(self, f"{channel}_channel")  # a new socket, connected, with a new monitor
        if refused:
            try:
                run_sync(self.wait_for_ready)(timeout=10)  # the new subscription has joined
            except Exception:
                pass  # a kernel that does not answer shows as dead at the next cell
        return refused

    def stop_channels(self):
        for channel in list(self._monitors):
            self._close_monitor(channel)
        super().stop_channels()
