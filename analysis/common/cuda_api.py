"""The CUDA API names the analysis recognises, defined once: which calls launch work on the GPU, copy, set memory,
capture graphs or make the host wait. Loading (load/calls.py), the integrity checks (sections/capture_figures.py) and the
rules (rules/diagnosis.py) all read these.

Runtime and driver names carry version and per-thread-stream suffixes in exports (`cudaMemcpy_v3020`,
`cudaLaunchKernel_ptsz`); every name family below is a prefix, so the suffixes match."""
from __future__ import annotations

import re

VERSION_SUFFIX = re.compile(r"(_v\d+|_ptsz|_ptds)+$")
KERNEL_LAUNCH = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel", "cuLaunchCooperativeKernel",
                 "cudaLaunch_v", "cuLaunchGrid")  # cudaLaunchKernelExC, cuLaunchKernelEx: prefixes of these
GRAPH_LAUNCH = ("cudaGraphLaunch", "cuGraphLaunch")
COPY = ("cudaMemcpy", "cuMemcpy")
MEMSET = ("cudaMemset", "cuMemset")
KERNEL_QUERY = ("cuKernelGet",)  # a kernel's attributes: neither copies nor waits
CAPTURE_BEGIN = re.compile(r"^cu(?:da)?StreamBeginCapture")
CAPTURE_END = re.compile(r"^cu(?:da)?StreamEndCapture")
# the calls that block the host until the GPU catches up (a stream, device, event, context or thread synchronize)
SYNC = re.compile(r"^(cuda(Stream|Device|Event|Ctx|Thread)Synchronize|cu(Stream|Ctx|Event)Synchronize)(_v\d+|_ptsz)*$")
# a synchronize right after an async copy makes the copy a blocking one (torch's `.cpu()`): events excluded, since
# waiting for an event recorded after the copy is the pattern that lets other work run meanwhile
SYNC_AFTER_COPY = r"cuda(?:Stream|Device|Ctx)Synchronize|cu(?:Stream|Ctx)Synchronize"


# one-time set-up (issue 58): the context, loading modules, the caching allocator growing (or freeing), streams; a
# launch call that holds the thread this long while the GPU idles loads its kernel's module (CUDA's lazy loading)
SETUP = re.compile(r"^cu(da)?(Init|DevicePrimaryCtx|CtxCreate|Malloc|MemAlloc|HostAlloc|MallocHost|HostRegister|Free|"
                   r"MemFree|FreeHost|HostUnregister|MemCreate|MemMap|MemAddressReserve|MemSetAccess|MemPoolCreate|"
                   r"StreamCreate|Module(Load|GetFunction|GetGlobal)|Library(Load|GetKernel|GetModule)|"
                   r"KernelGetFunction|GetDriverEntryPoint)")
SLOW_LAUNCH_NS = 1_000_000


def _prefixes(*names: str) -> re.Pattern:
    return re.compile("^(" + "|".join(re.escape(n) for n in names) + r")|^cu(da)?Launch\b")


LAUNCH = _prefixes(*KERNEL_LAUNCH, *GRAPH_LAUNCH)  # what a launching thread issues for each piece of GPU work
NO_COPY = _prefixes(*KERNEL_LAUNCH, *KERNEL_QUERY)  # calls that never issue a copy or a wait (a graph launch may copy)


def base_name(name: str) -> str:
    """cudaStreamSynchronize_v3020 -> cudaStreamSynchronize."""
    return VERSION_SUFFIX.sub("", str(name))


def kind(name: str) -> str:
    """What a runtime call does: kernel, graph, copy, memset (by name prefix), capture_begin, capture_end, or ''."""
    for k, prefixes in (("kernel", KERNEL_LAUNCH), ("graph", GRAPH_LAUNCH), ("copy", COPY), ("memset", MEMSET)):
        if name.startswith(prefixes):
            return k
    for k, pattern in (("capture_begin", CAPTURE_BEGIN), ("capture_end", CAPTURE_END)):
        if pattern.match(name):
            return k
    return ""
