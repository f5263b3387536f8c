"""Option values checked before any work, refused in one line in the tool's own words.

click accepts `--min-gap-ms nan`, `--link-gbps -5` or `--top -1` as numbers, and answers a value it cannot parse
with a three-line usage block; both end here in one line and exit code 2.
"""
from __future__ import annotations

import difflib
import math
import os
import re
import sys
from pathlib import Path

import click

from ..facade import TraceError, cores, executor

MAX_NS = 2 ** 62  # 146 years of ns: past any trace timestamp, and far enough from int64's end for sums and bins


DEBUG_ENV = ("NSYS_TRANSFER_DEBUG", "ANALYZE_TRACE_DEBUG")  # either shows an internal error's traceback
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click 8.2 on; isinstance(e, ()) is False


class OneLineErrors:
    """For a click command or group: its usage errors (unknown option, a value that is not a number, ...) are one
    line, in the command's name, with exit code 2, and an error nobody foresaw (a bug) is one line with exit code 3,
    not a traceback (NSYS_TRANSFER_DEBUG=1 shows it)."""

    name: str

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """Run the command; errors become one line on stderr with their exit code."""
        try:
            rc = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)  # type: ignore[misc]
        except click.UsageError as e:
            if isinstance(e, _NO_ARGS_IS_HELP):  # a group run bare (click 8.2 on): its help, as click shows it
                e.show()
                sys.exit(2)
            where = self._path(e.ctx)
            click.echo(f"{where}: {e.format_message()} (see {where} --help)", err=True)
            sys.exit(2)
        except click.ClickException as e:
            click.echo(f"{self._path(getattr(e, 'ctx', None))}: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo(f"{self.name}: interrupted", err=True)
            sys.exit(130)
        except Exception as e:
            if any(os.environ.get(v) for v in DEBUG_ENV):
                raise
            first = (str(e).strip().splitlines() or [""])[0]  # one line, whatever the exception's text holds
            click.echo(f"{self.name}: internal error: {type(e).__name__}: {first} (set {DEBUG_ENV[0]}=1 for details)",
                       err=True)
            sys.exit(3)
        if standalone_mode:
            sys.exit(rc if isinstance(rc, int) else 0)
        return rc

    def _path(self, ctx) -> str:
        """The command's name, and the subcommand's after it when the error is the subcommand's."""
        if ctx is None or ctx.command is self:
            return self.name
        return f"{self.name} {ctx.command.name}"


class OneLineCommand(OneLineErrors, click.Command):
    """`@click.command(cls=OneLineCommand, name="analyze-trace")`: a command whose errors are one line."""


class OneLineGroup(OneLineErrors, click.Group):
    """`@click.group(cls=OneLineGroup, name="nsys-transfer")`: a group whose and whose subcommands' errors are one
    line."""


def check_numbers(**values) -> None:
    """Each option value against its rule (RULES): a finite number in range; TraceError naming the first that is not."""
    for name, value in values.items():
        if value is None or name not in RULES:
            continue
        low, inclusive, what = RULES[name]
        flag = "--" + name.replace("_", "-")
        if isinstance(value, float) and not math.isfinite(value):
            raise TraceError(f"{flag} {value}: must be a finite number ({what})")
        if value < low or (value == low and not inclusive):
            bound = f"at least {low:g}" if inclusive else f"more than {low:g}"
            raise TraceError(f"{flag} {value:g}: must be {bound} ({what})")


def check_regex(flag: str, value: str | None) -> None:
    """TraceError when an option's regular expression does not compile."""
    try:
        re.compile(value or "")
    except re.error as e:
        raise TraceError(f"{flag} {value!r} is not a valid regular expression ({e})") from None


# option -> (lowest value, whether it is allowed, what the option is)
RULES = {
    "min_gap_ms": (0.0, True, "the shortest idle gap reported, in ms"),
    "link_gbps": (0.0, False, "the host link's speed in GB/s"),
    "top": (1, True, "rows in each top-N list"),
    "pipeline_depth": (1, True, "output buffers in the pipeline, for the short-capture rule"),
    # a negative gate would fail a change that is as fast (a demand for a speed-up is no regression gate)
    "fail_if_slower": (0.0, True, "how much slower AFTER may be, in percent"),
}


def step_regex_option(default_says: str):
    """--step-regex, declared here once for analyze-trace and verify (default_says: its default, in the command's
    words)."""
    return click.option("--step-regex", default=None, help=f"NVTX ranges that are steps{default_says}")


def link_gbps_option(default_says: str):
    """--link-gbps, declared here once for analyze-trace and compare-traces (default_says: its default, in the
    command's words)."""
    return click.option("--link-gbps", default=None, type=float, help=f"host link speed in GB/s (default: {default_says})")


def probe_option(says: str):
    """--probe, declared here once for analyze-trace and compare-traces (says: what it is for there, its default)."""
    return click.option("--probe", "probe_path", type=click.Path(dir_okay=False, path_type=Path),
                        help=f"link-probe JSON{says}")


def executor_options(command):
    """--jobs and --dask, for the commands that analyse several traces (analyze-trace, compare-traces)."""
    command = click.option(
        "--dask", "dask", envvar="DASK_SCHEDULER_ADDRESS", show_envvar=True, default=None, metavar="ADDRESS",
        help="with several traces: analyse them on the Dask cluster whose scheduler is at ADDRESS (tcp://host:8786; "
             "TLS as the dask config says), each trace read by a worker at the path given, so give paths the workers "
             "see; local:N starts N workers here, on 127.0.0.1 only; needs pip install 'nsys-transfer[dask]'")(command)
    return click.option(
        "-j", "--jobs", type=int, default=None, metavar="N",
        help=f"with several traces: analyse them in N worker processes (default: the cores, {cores()} here; "
             "1: one after the other in this process). Each worker holds one trace's analysis at a time, so N "
             "workers need N x the memory of one trace's analysis")(command)


def chosen_executor(jobs: int | None, dask: str | None, items: int):
    """The executor --jobs and --dask ask for (analysis/executors/parallel.executor): --jobs on the command line wins over a
    scheduler address from DASK_SCHEDULER_ADDRESS; both on the command line are refused; the environment's address is not
    used (nor checked) for a single trace, which runs here. TraceError for a bad value."""
    from_env = dask and click.get_current_context().get_parameter_source("dask") == \
        click.core.ParameterSource.ENVIRONMENT
    if dask and jobs is not None and not from_env:
        raise TraceError("--jobs and --dask both say where the traces are analysed: give one")
    if from_env and (jobs is not None or items <= 1):
        dask = None
    return executor(jobs, dask, items)


def refuse_unknown_option(args) -> None:
    """An option a command that hands its unknown options on does not know, before the program (`run --sampel none
    -- python my.py`): click, told to pass unknown options on so that the program's own (`python my.py --batch 64`)
    reach it, would hand it over as the program to run; a program's name never starts with '-', so it is named as the
    option it is, with the command's nearest ones."""
    first = args[0] if args else ""
    if not first.startswith("-"):
        return
    ctx = click.get_current_context()
    name = first.split("=", 1)[0]
    known = [o for p in ctx.command.params for o in getattr(p, "opts", []) if o.startswith("--")]
    raise click.NoSuchOption(name, possibilities=difflib.get_close_matches(name, known, n=2, cutoff=0.6), ctx=ctx)
