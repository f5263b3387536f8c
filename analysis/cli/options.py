"""Option values checked before any work, refused in one line in the tool's own words.

click accepts `--min-gap-ms nan`, `--link-gbps -5` or `--top -1` as numbers, and answers a value it cannot parse
with a three-line usage block; both end here in one line and exit code 2.
"""
from __future__ import annotations

import math
import sys

import click

from nsys_transfer.analysis.run import parallel
from nsys_transfer.analysis.common.errors import TraceError

MAX_NS = 2 ** 62  # 146 years of ns: past any trace timestamp, and far enough from int64's end for sums and bins


class OneLineCommand(click.Command):
    """A click command whose usage errors (unknown option, a value that is not a number, ...) are one line, in the
    command's name, with exit code 2: `@click.command(cls=OneLineCommand, name="analyze-trace")`."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """Run the command; usage and click errors become one line on stderr with their exit code."""
        try:
            rc = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as e:
            click.echo(f"{self.name}: {e.format_message()} (see {self.name} --help)", err=True)
            sys.exit(2)
        except click.ClickException as e:
            click.echo(f"{self.name}: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo(f"{self.name}: interrupted", err=True)
            sys.exit(130)
        if standalone_mode:
            sys.exit(rc if isinstance(rc, int) else 0)
        return rc


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


# option -> (lowest value, whether it is allowed, what the option is)
RULES = {
    "min_gap_ms": (0.0, True, "the shortest idle gap reported, in ms"),
    "link_gbps": (0.0, False, "the host link's speed in GB/s"),
    "top": (1, True, "rows in each top-N list"),
    "pipeline_depth": (1, True, "output buffers in the pipeline, for the short-capture rule"),
}


def executor_options(command):
    """--jobs and --dask, for the commands that analyse several traces (analyze-trace, compare-traces)."""
    command = click.option(
        "--dask", "dask", envvar="DASK_SCHEDULER_ADDRESS", show_envvar=True, default=None, metavar="ADDRESS",
        help="with several traces: analyse them on the Dask cluster whose scheduler is at ADDRESS (tcp://host:8786; "
             "TLS as the dask config says), each trace read by a worker at the path given, so give paths the workers "
             "see; local:N starts N workers here, on 127.0.0.1 only; needs pip install 'nsys-transfer[dask]'")(command)
    return click.option(
        "-j", "--jobs", type=int, default=None, metavar="N",
        help=f"with several traces: analyse them in N worker processes (default: the cores, {parallel.cores()} here; "
             "1: one after the other in this process). Each worker holds one trace's analysis at a time, so N "
             "workers need N x the memory of one trace's analysis")(command)


def chosen_executor(jobs: int | None, dask: str | None, items: int):
    """The executor --jobs and --dask ask for (parallel.executor): --jobs on the command line wins over a scheduler
    address from DASK_SCHEDULER_ADDRESS; both on the command line are refused. TraceError for a bad value."""
    if dask and jobs is not None:
        source = click.get_current_context().get_parameter_source("dask")
        if source != click.core.ParameterSource.ENVIRONMENT:
            raise TraceError("--jobs and --dask both say where the traces are analysed: give one")
        dask = None
    return parallel.executor(jobs, dask, items)
