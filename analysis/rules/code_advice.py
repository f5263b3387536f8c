"""The program's line behind each finding, and advice that fits what that line's work is for.

Every rule says which resource held the GPU; the Python stacks (sections/code_lines.py) say which line of the program
held it and what the line is for (sections/roles.py). This pass gives each finding its line (`line` in the JSON:
file, line, function, source text, the path from the loop's line, the role), and where the role's own advice is
surer than the rule's category advice, that advice: a copy of a module's weights is not an output pipeline's job, and a
loop that syncs per element is no CUDA graph. Two findings whose lines do one job (the copy of an output and the
post-processing after it) become one, carrying both costs."""
from __future__ import annotations

from dataclasses import replace

from ..common import idle_causes
from ..common.idle_causes import CPU, CPU_RANGE, INPUT
from .base import Finding, ms, severity_of
from ..sections import roles
from ..sections.code_lines import CodeLines, CodeSite

# the output side's rule stands behind the CPU work and the waits of the loop too (its workers' post-processing, its
# hand-off), beside its own cause, the drain
ALSO_SITES_OF = {"output-bound": (CPU_RANGE.name, CPU.name, INPUT.name)}


def sites_of(rule: str) -> tuple[str, ...]:
    """Which of the code section's lines stand behind a rule's idle time: the idle causes it reports
    (common/idle_causes.py), and ALSO_SITES_OF's; none for a rule of no idle cause."""
    return (*ALSO_SITES_OF.get(rule, ()), *(c.name for c in idle_causes.CAUSES if c.rule == rule))


COPY_RULES = ("pageable-memcpy", "sync-memcpy")
SYNC_ROLES = (roles.PER_ELEMENT, roles.TIMING_SYNC, roles.CACHE_CHURN)
SYNC_SHARE = 0.3  # of the short gaps' sampled time at SYNC_ROLES lines: they, not the launches, leave the GPU idle
LAUNCHING_ROLES = (roles.MODEL, roles.PER_ELEMENT, roles.TIMING_SYNC, roles.CACHE_CHURN, roles.WEIGHTS)
MERGED_ROLES = (roles.OUTPUT, roles.WEIGHTS)  # a copy and the host's work on the same data: one job


def worker_count(default: int, cores: int | None) -> int:
    """The worker processes to advise: the default, no more than the capture machine's cores where the trace says
    them (more workers than cores only share them: torch warns of it for a DataLoader's)."""
    return max(1, min(default, cores)) if cores else default


def _cores_said(cores: int | None) -> str:
    return f"the {cores} cores of the machine the trace was recorded on" if cores else "the idle cores"


def _advice(site: CodeSite, cores: int | None = None) -> str | None:
    """The change for the line's role, naming the line; None where the rule's own advice is the better one."""
    at = f"{site.place} (`{site.code}`)"
    if site.role == roles.MODEL and site.threads > 1:
        return _batch_the_requests(site, at)
    return {
        roles.INPUT: f"{at} prepares the input on the launching thread: move that work into DataLoader worker "
                     f"processes (`DataLoader(..., num_workers={worker_count(8, cores)}, pin_memory=True, "
                     "persistent_workers=True)`), or do "
                     "it on the GPU after the copy",
        roles.WEIGHTS: f"{at} moves a module's weights between the host and the GPU every step: keep the model on the "
                       "GPU (`.to('cuda')` once, before the loop); where it cannot fit, pin the host copies once "
                       "(`pin_memory()`) and prefetch the next block on a side stream while this one runs",
        roles.PER_ELEMENT: f"{at} reads the GPU one element at a time (each `.item()`, `.tolist()` or `int()` of a "
                           "CUDA tensor is a copy and a sync): do the work on the whole batch on the GPU (e.g. "
                           "`torch.topk`, `argmax`), then copy the batch's result once, with one `.cpu()` or "
                           "`.tolist()` per batch",
        roles.ACCUMULATION: f"{at} copies the whole accumulated array each time it grows"
                            + (f" ({site.growth[0]:,.1f} ms a call at the start, {site.growth[1]:,.1f} ms at the end)"
                               if site.growth else "")
                            + ": append each batch's result to a list and concatenate once after the loop, or "
                              "preallocate the array and write each batch into its slice",
        roles.TIMING_SYNC: f"{at} synchronises the GPU on every step to time it, so the GPU drains and waits: time "
                           "with CUDA events (`torch.cuda.Event(enable_timing=True)`) read after the loop, or time "
                           "only the whole loop",
        roles.CACHE_CHURN: f"{at} empties PyTorch's memory cache every step, so the next step allocates with "
                           "cudaMalloc again: remove it from the loop",
        roles.MODEL: f"{at} runs the model, and the host issues its kernels slower than the GPU runs them (Python "
                     "and dispatch overhead between small kernels): capture the forward in a CUDA graph "
                     "(`torch.compile(model, mode='reduce-overhead')`), or give each call more work (a larger batch)",
        roles.OUTPUT_WAIT: _output_wait(at, cores),
        roles.DISK: f"{at} writes to disk on the launching thread: hand the writes to a pool of threads or processes "
                    "(`concurrent.futures.ThreadPoolExecutor`) so the loop goes on launching",
    }.get(site.role)


LOADER_WORKERS = "DataLoader worker process"  # a path step code_lines writes where the loop waits on its workers


def _output_wait(at: str, cores: int | None) -> str:
    return (f"{at} waits inside the OutputPipeline for its output workers (their pace, not the loop's own work): "
            f"give it more workers (`workers=`, up to {_cores_said(cores)}, which the loop shares), or make the work "
            "each output takes cheaper (one NumPy or torch call over the whole array instead of a Python loop of "
            "small ones)")


def cpu_advice(site: CodeSite, cores: int | None = None) -> str:
    """The change for a line of a capture without GPU work, by its role: what the line's work costs the main thread's
    loop here, and how to take it off (nothing of the GPU: none ran)."""
    at = f"{site.place} (`{site.code.strip()}`)" if site.code.strip() else site.place  # torch.profiler: maybe no text
    workers = next((step for step in site.path if LOADER_WORKERS in step), None)
    if site.role == roles.INPUT and workers:
        work = site.path[-2] if len(site.path) >= 2 and "(" in site.path[-2] else site.path[-1]
        return (f"{at} waits for the next batch: its {workers.split(' DataLoader')[0]} DataLoader workers make "
                f"them slower than the loop takes them, their time going to {work}: make that work cheaper (one "
                "NumPy or torch call over the whole array instead of a Python loop of small ones), or give the "
                f"loader more workers (`num_workers=`, up to {_cores_said(cores)})")
    return {
        roles.INPUT: f"{at} prepares the input on the main thread, between the loop's steps: move it into DataLoader "
                     f"worker processes (`DataLoader(..., num_workers={worker_count(4, cores)}, persistent_workers=True)`), "
                     "where it runs "
                     "beside the loop, and make it cheaper (one NumPy or torch call over the whole array instead of a "
                     "Python loop of small ones)",
        roles.OUTPUT: f"{at} handles each output on the main thread: hand it to worker processes "
                      f"(`nsys_transfer.fixes.OutputPipeline(process, workers={worker_count(4, cores)})` takes CPU tensors "
                      "too, or a "
                      "`concurrent.futures.ProcessPoolExecutor`) so the loop goes on",
        roles.PER_ELEMENT: f"{at} reads a tensor one element at a time (each `.item()`, `.tolist()` or `int()` a "
                           "separate call): work on the whole batch at once (`argmax`, `topk`, a mask), then convert "
                           "the batch's result once",
        roles.ACCUMULATION: f"{at} copies the whole accumulated array each time it grows"
                            + (f" ({site.growth[0]:,.1f} ms a call at the start, {site.growth[1]:,.1f} ms at the end)"
                               if site.growth else "")
                            + ": append each batch's result to a list and concatenate once after the loop, or "
                              "preallocate the array and write each batch into its slice",
        roles.OUTPUT_WAIT: _output_wait(at, cores),
        roles.DISK: f"{at} writes to disk on the main thread: hand the writes to a pool of threads "
                    "(`concurrent.futures.ThreadPoolExecutor`) so the loop goes on",
        roles.MODEL: f"{at} runs the model: the work the loop is for. On the CPU, run it under "
                     "`torch.inference_mode()` and give each call more work (a larger batch); on a GPU, trace it "
                     "there: the copies to and from it are then measured too",
        roles.WEIGHTS: f"{at} moves a module's weights every step: move the model once, before the loop",
    }.get(site.role, f"{at} is the program's own computation on the main thread: do it on whole arrays (one NumPy or "
                     "torch call instead of a Python loop of small ones), or in worker processes beside the loop")


def _batch_the_requests(site: CodeSite, at: str) -> str:
    """A model run by several threads in turn, each with its own small input (a server's request threads): the
    kernels are small because each call is one request's, which no CUDA graph changes; batching the calls does."""
    caller = f", called at {site.path[0].split('  ')[0]}" if site.path and not site.path[0].startswith(site.place) \
        else ""
    return (f"{at}{caller} runs the model on {site.threads} threads in turn, one request a call, so its kernels are "
            "too small to keep the GPU busy: batch the requests, the threads putting their inputs on a queue and one "
            "thread taking what is waiting, running the model once on the padded batch and handing each result back "
            "through a `concurrent.futures.Future`")


def _site_for(finding: Finding, code: CodeLines) -> CodeSite | None:
    if finding.rule in COPY_RULES:
        kind = finding.subject if finding.subject in ("DtoH", "HtoD", "DtoD") else None
        return code.top((kind,)) if kind else code.top(("DtoH", "HtoD"))
    causes = sites_of(finding.rule)
    if finding.rule == "launch-bound":  # short gaps: the line that issues the small work, not one that ran nearby
        return code.top(causes, roles=LAUNCHING_ROLES)
    if finding.rule == "host-sync":  # a read's turnarounds: the short gaps too (sections/idle.py gives them whole)
        return code.top(("host-sync", "launch"), roles=SYNC_ROLES)
    return code.top(causes) if causes else None


def _yields_to_sync(finding: Finding, code: CodeLines) -> Finding:
    """launch-bound whose short gaps are spent at the program's reads of GPU values and syncs (SYNC_ROLES hold at
    least SYNC_SHARE of the sampled time in them) is host-sync: no CUDA graph can hold a loop that syncs."""
    reads = code.sites(("launch",), roles=SYNC_ROLES)
    share = sum(s.share for s in reads)
    if finding.rule != "launch-bound" or share < SYNC_SHARE:
        return finding
    where = ", ".join(f"{s.place} `{s.code}`" for s in reads[:3])
    return replace(finding, rule="host-sync", subject=None, evidence=(
        f"{finding.evidence}; {share:.0%} of the sampled time in those gaps is at the program's reads of GPU values "
        f"and syncs ({where}): each drains the GPU, which then waits for the next small piece of work"))


def _with_line(finding: Finding, site: CodeSite, cores: int | None = None) -> Finding:
    advice = _advice(site, cores)
    if finding.rule == "launch-bound" and site.role not in SYNC_ROLES and not (site.role == roles.MODEL
                                                                                and site.threads > 1):
        advice = None  # short gaps while the line launches kernels: the rule's CUDA-graph advice stands
    suggestion = advice if advice else f"{finding.suggestion} (the line: {site.place} `{site.code}`)"
    subject = finding.subject
    if (finding.rule == "gpu-idle-cpu-bound" and (subject is None or ": " in subject)) or \
            (finding.rule == "host-sync" and subject is None):
        subject = site.place  # the program's line names the work better than the CPU samples' innermost function
    evidence = finding.evidence
    if site.growth:  # a cost that rises with the step is no steady state: say so with its two ends
        evidence += (f"; the work at {site.place} grows through the run: {site.growth[0]:,.1f} ms a step at the start, "
                     f"{site.growth[1]:,.1f} ms at the end, so the window is no steady state")
    return replace(finding, suggestion=suggestion, line=site, subject=subject, evidence=evidence)


def _one_job(a: Finding, b: Finding) -> bool:
    """Whether two findings are one job: their lines are one line; or a copy and the idle time, or the two directions'
    copies, of one output's or one module's weights' handling; or both are the syncs."""
    la, lb = a.line, b.line
    if la is None or lb is None:
        return a.rule == b.rule == "host-sync"
    same_line = (la.file, la.line) == (lb.file, lb.line)
    a_copy = a.rule in COPY_RULES or b.rule in COPY_RULES
    return same_line or a.rule == b.rule == "host-sync" or \
        (a_copy and la.role == lb.role and la.role in MERGED_ROLES)


def _merged(findings: list[Finding], total_ns: int) -> list[Finding]:
    """Findings of one job (_one_job) as one: the costlier's, carrying both costs."""
    out: list[Finding] = []
    for f in sorted(findings, key=lambda x: -x.impact_ns):  # each merged into the costlier of its job
        twin = next((g for g in out if g.severity != "info" and f.severity != "info" and _one_job(g, f)), None)
        if twin is None:
            out.append(f)
            continue
        impact = twin.impact_ns + f.impact_ns
        share = impact / total_ns if total_ns else 0.0
        where = f" at {f.line.place}" if f.line else ""
        merged = replace(twin, impact_ns=impact, impact_fraction=round(min(share, 1.0), 4),
                         severity=severity_of(share), parts=twin.parts + (f,),
                         evidence=f"{twin.evidence}; and, for the same {f.line.role if f.line else 'work'} work{where}, "
                                  f"{f.rule} ({ms(f.impact_ns)}): {f.evidence}")
        out[out.index(twin)] = merged
    return out


def attach(findings: list[Finding], code: CodeLines | None, total_ns: int) -> list[Finding]:
    """The findings with their lines and the advice their lines' roles call for, the findings of one job merged."""
    if code is None or not (code.by_cause or code.by_copy):
        return findings
    lined = []
    for f in findings:
        f = _yields_to_sync(f, code)
        site = _site_for(f, code) if f.severity != "info" else None
        lined.append(_with_line(f, site, code.cores) if site is not None else f)
    return _merged(lined, total_ns)
