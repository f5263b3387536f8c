"""Whether a command can start at all, checked before nsys runs: a missing program or script is said in one line
instead of being traced (nsys would record the failure and leave a trace of nothing)."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
TAKES_VALUE = {"-W", "-X", "-Q"}   # Python's options whose value is the next word
ENDS_OPTIONS = {"-c", "-m", "-"}   # the program is then not a file


def cannot_start(command: list[str]) -> str | None:
    """Why `command` cannot start, in words (what is missing and where it was looked for); None when it can."""
    exe = command[0]
    if os.sep in exe:
        if not Path(exe).is_file():
            return f"{exe}: no such program (looked from {Path.cwd()}); give the path of an existing program"
        if not os.access(exe, os.X_OK):
            return f"{exe}: not executable; chmod +x it, or run it through its interpreter"
    elif shutil.which(exe) is None:
        return f"{exe}: no such program on PATH; give its path, or install it"
    if PYTHON.match(Path(exe).name):
        script = python_script(command[1:])
        if script is not None and not Path(script).exists():
            return (f"{script}: no such file (looked from {Path.cwd()}); give the path of the Python program "
                    "to trace")
    return None


def python_script(args: list[str]) -> str | None:
    """The script a Python command line runs (`python -u my.py --x`: my.py); None for -c, -m, stdin or none."""
    words = iter(args)
    for word in words:
        if word in ENDS_OPTIONS or word.startswith(("-c", "-m")) and len(word) > 2:
            return None
        if word in TAKES_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None
