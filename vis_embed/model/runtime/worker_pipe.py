"""The messages between a preparation worker and its pool (model/runtime/prepare_pool.py).

A result is pickled with protocol 5, its arrays' buffers out of band: the sizes, then the
payload (framed ``Connection`` messages), then each array's bytes straight from its memory.  The
parent reads each array straight into fresh memory that becomes the tensor's storage: one copy,
no pickling of tensor data.  Not ``Connection.recv_bytes_into``: CPython collects a message's
chunks in a ``BytesIO`` and copies them out again -- three copies of a 2.4 MB image, 3.0-3.3
CPU-ms an item against 1.8-1.9 this way, in the process that also runs the model
(benchmarks/feed_ceiling.py, docs/benchmarks.md).
"""

from __future__ import annotations

import os
import pickle
import sys
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

# The arrays' bytes cross as they are (no framing: their sizes went first) where the pipe is a
# POSIX descriptor, read with readv straight into their destination; elsewhere through the
# Connection's own framed messages.
RAW_BUFFERS = hasattr(os, "readv") and sys.platform != "win32"


def send_message(conn: Connection, message: Any) -> None:
    """Pickle-5 with the arrays' buffers sent out of band, straight from their memory."""
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    views = [buffer.raw() for buffer in buffers]
    conn.send_bytes(pickle.dumps([view.nbytes for view in views]))
    conn.send_bytes(payload)
    for view in views:
        if RAW_BUFFERS:
            write_all(conn.fileno(), view)
        else:
            conn.send_bytes(view)


def receive_message(conn: Connection) -> Any:
    """The message :func:`send_message` sent, its arrays' memory fresh and the parent's own."""
    sizes = pickle.loads(conn.recv_bytes())
    payload = conn.recv_bytes()
    buffers = []
    for size in sizes:
        buffer = np.empty(size, dtype=np.uint8)  # becomes the array's (and the tensor's) memory
        if RAW_BUFFERS:
            read_exactly(conn.fileno(), memoryview(buffer))
        else:
            conn.recv_bytes_into(buffer)
        buffers.append(buffer)
    return pickle.loads(payload, buffers=buffers)


def write_all(descriptor: int, view: memoryview) -> None:
    """Write all of ``view`` to the pipe (a write to a full pipe returns a part)."""
    sent = 0
    while sent < view.nbytes:
        sent += os.write(descriptor, view[sent:])


def read_exactly(descriptor: int, view: memoryview) -> None:
    """Fill ``view`` from the pipe (the kernel copies into it: no chunk objects, no second copy);
    the writer gone before it is full: EOFError (the collector's crash path)."""
    received = 0
    while received < view.nbytes:
        count = os.readv(descriptor, [view[received:]])
        if count == 0:
            raise EOFError("the preparation worker closed its pipe in the middle of an item")
        received += count
