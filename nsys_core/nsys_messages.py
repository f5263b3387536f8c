"""nsys's own warnings and errors, picked out of a profiling run's console output.

`nsys profile` prints its messages into the same stream as the profiled program (2023.4 has no option to separate
them), so lines are recognised by their shape. Seen from real runs:

    WARNING: --sample=system-wide requires root privileges or a paranoid level of 0 or less.   (capture, non-root)
    Importer error status: Importation succeeded with non-fatal errors.                         (import, CUDA 13 driver)
    Installed CUDA driver version (13.0) is not supported by this build of Nsight Systems. ...  (injection, 2024+)
    **** Analysis failed with: / Status: TargetProfilingFailed / ... [QuadDCommon::tag_message*] = Unknown runtime
    API function index: 468 / **** Errors occurred while processing the raw events. ****  (import, 2023.4, CUDA 13)

A run whose trace lost events still exits 0 and exports; these lines are the only word nsys gives, so the run
record keeps them (`nsys_messages`), the run prints them at its end, and `--strict` fails on them.
"""
from __future__ import annotations

import re

# One line each; the first that matches names the message's kind.
PATTERNS = [
    ("error", re.compile(r"^\s*(?:ERROR|Error|FATAL|Fatal)\b\s*[:!-]")),
    ("error", re.compile(r"Importer error status|non-fatal error|failed to import|Importation failed", re.I)),
    ("error", re.compile(r"^\*{4}.*\b(?:fail|failed|errors?)\b", re.I)),   # **** Analysis failed with: ...
    ("error", re.compile(r"^\s*Status:\s*\w*Fail")),                    # Status: TargetProfilingFailed
    ("error", re.compile(r"\[QuadDCommon::tag_message\*\] = ")),        # the importer's exception text
    ("warning", re.compile(r"^\s*(?:WARNING|Warning)\b\s*[:!-]")),
    ("warning", re.compile(r"\b(?:dropped|lost)\b.*\b(?:events?|buffers?|records?|samples?)\b|"
                           r"\b(?:events?|buffers?|records?)\b.*\b(?:dropped|lost|discarded|overflow(?:ed)?)\b", re.I)),
    ("warning", re.compile(r"\bCUPTI\b.*\b(?:error|fail|unsupported|not supported|insufficient|lost)", re.I)),
    ("warning", re.compile(r"is not supported by this build of Nsight Systems|"
                           r"Not all (?:CUDA|NVTX|OS runtime) events might have been collected", re.I)),
]
# nsys's words that question whether the capture holds every event, by kind, seen in real exports' DIAGNOSTIC_EVENT
# (2024+) and console output: "CUDA profiling might have not been started correctly" (a process whose CUDA tracing
# never started: a PyTorch program on a machine without a GPU, a helper that loads CUDA's libraries, or a program
# whose CUDA work went unrecorded), "Not all CUDA events might have been collected" (a process nsys could not flush
# at its end: killed, os._exit, still running when the capture stopped), events or buffers lost or dropped. The
# analysis reconciles each with the rows (analysis/sections/capture_messages.py doubts), `--check` the run record's.
DOUBTS = [
    ("not-started", re.compile(r"\b(CUDA) profiling might have not been started correctly", re.I)),
    ("not-all", re.compile(r"\bNot all (.+?) events might have been collected", re.I)),
    ("lost", re.compile(r"\b(?:dropped|lost)\b.*\b(events?|buffers?|records?)\b|"
                        r"\b(events?|buffers?|records?)\b.*\b(?:dropped|lost|discarded|overflow(?:ed)?)\b", re.I)),
]
# the events the analysis reads: a doubt about others (OpenGL, Vulkan, ...) questions nothing it shows
READ_EVENTS = ("CUDA", "NVTX", "OS runtime libraries")
CPU_SAMPLES = "CPU samples"  # what nsys calls Perf events and CPU profiling records: the CPU sampling's, no others
# nsys 2024.2, a CPU-only capture under load: "Some events (\t9) were lost (including Perf:\t9). Certain charts ...",
# and per thread "Process 16104, Thread 16110, lost 1 CPU profiling records (e.g. CPU Instruction Pointer samples or
# CPU context switch tracing data)"
LOST_SOME = re.compile(r"Some events \(\s*(\d+)\) were lost \(including ([^)]*)\)", re.I)
LOST_RECORDS = re.compile(r"\blost (\d+) CPU profiling records", re.I)


def doubt(text: str) -> tuple[str, str] | None:
    """(kind, events) when nsys's message questions whether the capture holds every event the analysis reads:
    kind 'not-started', 'not-all' or 'lost'; events 'CUDA', 'NVTX', 'OS runtime libraries' ('events' when it does
    not say which). None for any other message, and for events the analysis does not read."""
    for kind, pattern in DOUBTS:
        m = pattern.search(text)
        if not m:
            continue
        events = next((g for g in m.groups() if g), "events")
        if kind == "lost":
            return kind, CPU_SAMPLES if lost_samples(text) is not None else "events"
        named = next((e for e in READ_EVENTS if events.lower() == e.lower()), None)
        return (kind, named) if named else None
    return None


def lost_samples(text: str) -> int | None:
    """How many CPU samples a message of nsys's says were lost, where those are all it lost (Perf events alone, or a
    thread's CPU profiling records); None for any other message."""
    m = LOST_SOME.search(text)
    if m:
        kinds = [k.split(":")[0].strip().lower() for k in m.group(2).split(",") if k.strip()]
        return int(m.group(1)) if kinds and set(kinds) == {"perf"} else None
    m = LOST_RECORDS.search(text)
    return int(m.group(1)) if m else None


# nsys's progress and bookkeeping lines: never messages
PROGRESS = re.compile(r"^\s*(?:\[\d+/\d+\]|Generating '|Generated:|Collecting data|Processing events|"
                      r"Capture range (?:started|ended)|/.*\.(?:nsys-rep|sqlite|qdstrm)\s*$)")
MAX_MESSAGES = 50


def classify(line: str) -> str | None:
    """'error', 'warning', or None for a line that is not one of nsys's messages."""
    text = line.strip()
    if not text or PROGRESS.match(text):
        return None
    for kind, pattern in PATTERNS:
        if pattern.search(text):
            return kind
    return None


class MessageSink:
    """Collects messages line by line, as the output streams, tagged with the stage of the run they came from."""

    def __init__(self):
        self.messages: list[dict] = []
        self._seen: set[tuple[str, str]] = set()

    def feed(self, line: str, stage: str) -> None:
        """Keep the line if it is one of nsys's messages (at most MAX_MESSAGES, each once per stage)."""
        kind = classify(line)
        if kind is None:
            return
        text = " ".join(_readable(line).split())[:500]
        if (stage, text) in self._seen or len(self.messages) >= MAX_MESSAGES:
            return
        self._seen.add((stage, text))
        self.messages.append({"stage": stage, "kind": kind, "text": text})

    def feed_text(self, text: str, stage: str) -> None:
        """feed() every line of a block of text."""
        for line in text.replace("\r", "\n").splitlines():
            self.feed(line, stage)


def _readable(line: str) -> str:
    """The importer's exceptions come as one protobuf line with the message at its end:
    Value: "/dvs/.../TraceProcessEvent.cpp(45): Throw in function ...\\n...[QuadDCommon::tag_message*] = Unknown
    runtime API function index: 468\\n"
    -> "importer: TraceProcessEvent.cpp(45): Unknown runtime API function index: 468"."""
    m = re.search(r"\[QuadDCommon::tag_message\*\] = (.*?)(?:\\n|\"|$)", line)
    if not m:
        return line
    where = re.search(r"([A-Za-z0-9_]+\.cpp\(\d+\))", line)
    return f"importer: {where.group(1) + ': ' if where else ''}{m.group(1)}"


def parse(text: str, stage: str = "capture") -> list[dict]:
    """The messages in a saved console log (stage: where it came from)."""
    sink = MessageSink()
    import_started = False
    for line in text.replace("\r", "\n").splitlines():
        if not import_started and ".qdstrm" in line:
            import_started = True
        sink.feed(line, "import" if import_started and stage == "capture" else stage)
    return sink.messages


def summary_line(messages: list[dict]) -> str:
    """"2 errors and 1 warning"."""
    errors = sum(m["kind"] == "error" for m in messages)
    warnings = len(messages) - errors
    parts = [f"{errors} error{'s' * (errors != 1)}"] if errors else []
    parts += [f"{warnings} warning{'s' * (warnings != 1)}"] if warnings else []
    return " and ".join(parts)
