"""Deadlines for blocking socket calls, kept by one watchdog thread.

A socket timeout bounds each read, not a call: a server trickling one byte every
half second kept a call with a 1 s timeout alive for 18.5 s. Each API call
registers its socket with a deadline; past it, the watchdog shuts the socket down,
which ends the blocked read at once, and the caller reports the deadline. One
thread for all calls, sleeping until the nearest deadline: no timer thread per
call on the prepare path.
"""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
import time
from contextlib import suppress


class Watchdog:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._heap: list[tuple[float, int, socket.socket]] = []
        self._live: set[int] = set()
        self._expired: set[int] = set()
        self._numbers = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, sock: socket.socket, seconds: float) -> int:
        """Shut `sock` down unless `done` is called within `seconds`; a token for it."""
        with self._changed:
            token = next(self._numbers)
            deadline = time.monotonic() + seconds
            # The watchdog sleeps until the nearest deadline: only a nearer one needs it
            # awake. Calls share one timeout, so that is rare; waking it at every call
            # made it contend for the interpreter's lock in the middle of the call.
            nearer = not self._heap or deadline < self._heap[0][0]
            heapq.heappush(self._heap, (deadline, token, sock))
            self._live.add(token)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="api-deadlines", daemon=True)
                self._thread.start()
            if nearer:
                self._changed.notify()
        return token

    def done(self, token: int) -> bool:
        """Stop watching; True when the deadline had passed (the socket is shut down)."""
        with self._changed:
            self._live.discard(token)
            if len(self._heap) > 2 * len(self._live) + 64:
                # Finished calls stay in the heap until the watchdog reaches their
                # deadline; a busy node sheds them here instead, now and then.
                self._heap = [entry for entry in self._heap if entry[1] in self._live]
                heapq.heapify(self._heap)
            if token in self._expired:
                self._expired.discard(token)
                return True
            return False

    def _run(self) -> None:
        with self._changed:
            while True:
                while self._heap and self._heap[0][1] not in self._live:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._changed.wait()
                    continue
                deadline, token, sock = self._heap[0]
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._changed.wait(wait)
                    continue
                heapq.heappop(self._heap)
                self._live.discard(token)
                self._expired.add(token)
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
