"""The README's own-program loop (issue 49, item 5), as a user runs it from their own folder with `make -C CHECKOUT`:
PROG is found there, the capture options pass through OPTS, each trace is exactly OUT/NAME/NAME.sqlite (a second one
of a name is refused without FORCE=1, never numbered beside it), and the run ends with the analysis and the one next
command, the verify line with the real paths. Real captures of tests/programs/nvtx_steps.py."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import ROOT
from nsys_transfer.profiling.checks import has_gpu
from nsys_transfer.profiling.runner import previous_trace

PROGRAM = ROOT / "tests" / "programs" / "nvtx_steps.py"


def _make_trace(user, *words):
    """`make -C ROOT trace WORDS...` run from the folder `user`, as a shell there runs it (its PWD is `user`)."""
    env = {**os.environ, "PWD": str(user)}
    return subprocess.run(["make", "-s", "--no-print-directory", "-C", str(ROOT), "trace", *words], cwd=user, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def user(tmp_path, nsys):
    if not (ROOT / ".venv" / ".full").exists():
        pytest.skip("make trace needs the venv `make test` sets up")
    folder = tmp_path / "me"
    folder.mkdir()
    shutil.copyfile(PROGRAM, folder / "my.py")
    return folder


def test_the_loop_from_the_users_own_folder(user, tmp_path):
    runs = tmp_path / "runs"
    quick = "OPTS=--sample none --python-backtrace none"
    r = _make_trace(user, "PROG=my.py 2 out", "NAME=before", f"OUT={runs}", quick)
    assert r.returncode == 0, r.stderr[-3000:]
    before = runs / "before" / "before.sqlite"
    assert before.exists() and (user / "out" / "batch_1.bin").exists()  # my.py found, and run, in the user's folder
    rec = json.loads((runs / "before" / "before.run.json").read_text())
    assert "--sample=none" in rec["nsys_command"] and rec["recorded"]["python_backtrace"] is None
    # nsys's progress bar is neither echoed nor kept; the nsys in use is said in words, not as tab-separated fields
    assert "%]" not in r.stderr and not any("%]" in line for line in rec["last_lines"]), rec["last_lines"]
    assert "Generated:" in r.stderr and "\t" not in r.stderr + r.stdout
    assert "steps: 2 matching" in r.stdout  # the analysis
    first_next = r.stderr.strip().splitlines()[-1]
    assert f"run: wrote {before}" in r.stderr and first_next.startswith("next: ")
    # the one next command: verify compares two CPU-only captures too (their loops' time), so it is offered either way
    assert first_next.startswith("next: apply the fix") and ("verify compares the loops' time" in first_next) != has_gpu()

    r = _make_trace(user, "PROG=my.py 2 out", "NAME=after", f"OUT={runs}", quick)
    after = runs / "after" / "after.sqlite"
    assert r.returncode == 0, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert previous_trace(after) == before.resolve()  # what the verify line names as "before"
    assert last.startswith("next: ") and f" verify {before} {after} " in last + " "

    written = after.stat().st_mtime_ns
    r = _make_trace(user, "PROG=my.py 2 out", "NAME=after", f"OUT={runs}", quick)
    assert r.returncode != 0 and f"{runs / 'after' / 'after'}" in r.stderr and "FORCE=1" in r.stderr
    assert after.stat().st_mtime_ns == written and not list((runs / "after").glob("after-2*"))
    assert "run: using" not in r.stderr  # refused before nsys runs

    r = _make_trace(user, "PROG=my.py 2 out", "NAME=after", f"OUT={runs}", quick, "FORCE=1")
    assert r.returncode == 0 and after.stat().st_mtime_ns > written, r.stderr[-3000:]


def test_a_program_that_is_not_there_is_refused_before_nsys(user, tmp_path):
    r = _make_trace(user, "PROG=nope.py", f"OUT={tmp_path / 'runs'}")
    assert r.returncode != 0 and f"nope.py: no such file (looked from {user})" in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "runs" / "nope").exists()


def test_bad_capture_options_get_one_line(user, tmp_path):
    r = _make_trace(user, "PROG=my.py 1 out", f"OUT={tmp_path / 'runs'}", "OPTS=--sample sometimes")
    assert r.returncode != 0 and "--sample" in r.stderr and "Traceback" not in r.stderr


def test_a_mistyped_option_is_named_as_an_option(user, tmp_path):
    """issue 57, item 3: `OPTS="--sampel none"` is an option run does not know, not a program missing from PATH."""
    r = _make_trace(user, "PROG=my.py 1 out", f"OUT={tmp_path / 'runs'}", "OPTS=--sampel none")
    assert r.returncode == 2 and "No such option '--sampel'. Did you mean '--sample'?" in r.stderr, r.stderr[-2000:]
    assert "no such program" not in r.stderr and "Traceback" not in r.stderr and "run: using" not in r.stderr
    assert not list((tmp_path / "runs").rglob("*.sqlite"))
