"""The Python stacks of every thread of this process, sampled on a thread of its own and written beside the trace:
what `nsys-transfer run` records by default so that the analysis can name the program's line behind each finding.

Standard library only: it is loaded into the user's interpreter (sitecustomize.py beside it), whatever that has.
Nsight Systems 2024.2 samples Python (--python-sampling) but exports none of those frames to SQLite, so they are
taken here. Each sample is read with the GIL; a C call that holds the GIL delays the next sample until it returns,
so a sample stands for the time since the one before it (the analysis reads it so), and its stack is the line that
made the call. Files: NSYS_TRANSFER_PYSTACKS/<pid>.stacks, text, one record a line:

    H <pid> <monotonic ns> <utc ns> <interval ns>     once, first: the clocks at the start
    F <id> <line> <function> \\t <file> \\t <source text>  a frame's place, defined before its first use
    K <id> <frame id>,<frame id>,...                  a stack, outermost frame first
    S <monotonic ns> <thread id> <stack id>           a sample of one thread (its OS thread id)
"""
from __future__ import annotations

import atexit
import linecache
import os
import re
import sys
import threading
import time

ENV_DIR = "NSYS_TRANSFER_PYSTACKS"
ENV_INTERVAL_MS = "NSYS_TRANSFER_PYSTACKS_MS"
MAX_DEPTH = 80        # deeper frames (recursion) are cut from the outer end: the inner ones name the work
FLUSH_S = 0.2         # a process ended by os._exit() or a signal loses at most this much


# a library's or Python's own file (analysis/load/python_stacks.py LIBRARY says the same, and more): its source line is
# never shown, and reading it costs a spawned worker's start, whose every sample is a new module being imported
NO_SOURCE = re.compile(r"/(site|dist)-packages/|/lib/python\d\.\d+/|^<")

OS_THREAD_NAME = b"nsys-pystacks"  # what the trace's ThreadNames call this thread: the analysis leaves it out


def _name_os_thread(name: bytes) -> None:
    """Give this thread its OS name (Linux prctl PR_SET_NAME), so that a trace tells it from the program's own."""
    try:
        import ctypes  # noqa: PLC0415  (only in the sampling thread: a program that never samples never loads it)
        ctypes.CDLL(None).prctl(15, name, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class Sampler:
    """One process's sampler: started once, again in each forked child."""

    def __init__(self, directory: str, interval_s: float, flush_s: float = FLUSH_S):
        self.directory, self.interval_s, self.flush_s = directory, interval_s, flush_s
        self.frames: dict = {}   # (id of a code object, line) -> (frame id, the code object, kept alive: no id reuse)
        self.stacks: dict = {}   # tuple of frame ids -> id
        self.lines: list[str] = []
        self.fd = -1
        self.stop = threading.Event()
        self.me = 0
        self.last: dict = {}     # thread ident -> (innermost frame, its line, caller frame ids, stack id)

    def start(self) -> None:
        """Open this process's file and start the sampling thread."""
        pid = os.getpid()
        # a raw descriptor, no buffered file: a fork while this thread writes leaves the child no lock to wait on
        self.fd = os.open(os.path.join(self.directory, f"{pid}.stacks"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)  # an exec keeps the pid: the file goes on
        self.lines.append(f"H {pid} {time.monotonic_ns()} {time.time_ns()} {int(self.interval_s * 1e9)}\n")
        self.flush()
        t = threading.Thread(target=self._loop, name="nsys-transfer-pystacks", daemon=True)
        t.start()
        atexit.register(self.close)

    def _loop(self) -> None:
        self.me = threading.get_ident()
        _name_os_thread(OS_THREAD_NAME)
        last_flush = time.monotonic()
        while not self.stop.wait(self.interval_s):
            try:
                self._sample()
            except Exception:  # a sampler never breaks the program it watches
                pass
            if time.monotonic() - last_flush >= self.flush_s:
                self.flush()
                last_flush = time.monotonic()

    def _sample(self) -> None:
        now = time.monotonic_ns()
        frames = sys._current_frames()
        live = getattr(threading, "_active", None)  # ident -> Thread; an ident is reused by the next thread started
        if live is None:
            live = {t.ident: t for t in threading.enumerate()}
        main, pid, last, self.last = threading.main_thread().ident, os.getpid(), self.last, {}
        for ident, frame in frames.items():
            thread = live.get(ident)
            tid = thread.native_id if thread is not None else (pid if ident == main else None)
            if ident != self.me and tid is not None:
                self.lines.append(f"S {now} {tid} {self._stack(ident, frame, last.get(ident))}\n")

    def _stack(self, ident, frame, before) -> int:
        """The id of the thread's stack; where the innermost frame is the one sampled last time (a waiting thread, a
        long call), its callers are too, and only its line is read again."""
        line = frame.f_lineno
        if before is not None and before[0] is frame:
            callers, sid = before[2], (before[3] if before[1] == line else None)
        else:
            callers, sid = None, None
        if callers is None:
            callers, up = [], frame.f_back
            while up is not None and len(callers) < MAX_DEPTH - 1:
                callers.append(self._frame(up.f_code, up.f_lineno))
                up = up.f_back
            callers = tuple(reversed(callers))
        if sid is None:
            key = callers + (self._frame(frame.f_code, line),)
            sid = self.stacks.get(key)
            if sid is None:
                sid = self.stacks[key] = len(self.stacks)
                self.lines.append(f"K {sid} {','.join(map(str, key))}\n")
        # the frame is held one period at most: the next sample replaces it, or drops it with its thread
        self.last[ident] = (frame, line, callers, sid)
        return sid

    def _frame(self, code, line) -> int:
        # by the code object's id: hashing a code object hashes its bytecode and constants, nested functions' too, and a
        # module body's (every frame of an import) is large
        known = self.frames.get((id(code), line))
        if known is not None:
            return known[0]
        fid = len(self.frames)
        self.frames[(id(code), line)] = (fid, code)
        file = code.co_filename
        text = "" if NO_SOURCE.search(file) else linecache.getline(file, line or 0).strip().replace("\t", " ")
        name = getattr(code, "co_qualname", code.co_name)
        self.lines.append(f"F {fid} {line or 0} {name}\t{file}\t{text}\n")
        return fid

    def flush(self) -> None:
        """Write what was sampled since the last flush."""
        lines, self.lines = self.lines, []
        if self.fd >= 0 and lines:
            data = "".join(lines).encode("utf-8", "replace")
            while data:
                data = data[os.write(self.fd, data):]

    def close(self) -> None:
        """Stop sampling and write the rest (at exit)."""
        self.stop.set()
        self.flush()


_sampler: Sampler | None = None
_fork_hook = False


def start_from_environment(flush_s: float = FLUSH_S) -> None:
    """Start sampling when NSYS_TRANSFER_PYSTACKS names a folder; again in each forked child (its own file)."""
    global _sampler, _fork_hook
    directory = os.environ.get(ENV_DIR)
    if not directory or _sampler is not None or not os.path.isdir(directory):
        return
    interval = float(os.environ.get(ENV_INTERVAL_MS) or 10) / 1000
    _sampler = Sampler(directory, max(interval, 0.001), flush_s)
    _sampler.start()
    if not _fork_hook:
        os.register_at_fork(after_in_child=_restart_in_child)
        _fork_hook = True


def _restart_in_child() -> None:
    global _sampler
    old, _sampler = _sampler, None
    if old is not None and old.fd >= 0:
        old.lines = []  # the parent's unwritten lines are the parent's to write
        os.close(old.fd)
    # a forked worker often ends by os._exit() (multiprocessing clears its finalizers right after the fork): write
    # every sample as it is taken
    start_from_environment(flush_s=0)
