"""What a kernel's name says: a short but meaningful form of it, its arithmetic precision and the library it comes
from. nsys's shortName of a template kernel is its bare name (`Kernel2`); the demangled name holds the story
(`cutlass::Kernel2<cutlass_80_tensorop_d884gemm_128x128_16x3_nn_align1>`: an FP64 tensor-core GEMM from CUTLASS).
"""
from __future__ import annotations

import re

# first match wins, in this order; the names are what cuBLAS, cuDNN, CUTLASS, Triton and PyTorch kernels carry
PRECISION = (("FP64", r"d884|dgemm|_f64|\bdouble\b|fp64|zgemm"), ("TF32", r"tf32"), ("BF16", r"bf16|bfloat16"),
             ("FP16", r"h884|h1688|h16816|hgemm|_f16|fp16|\bhalf\b|__half"), ("INT8", r"i8816|imma|int8"),
             ("FP8", r"e4m3|e5m2|fp8"), ("FP32", r"s1688|s884|sgemm|_f32|fp32|\bfloat\b"))
LIBRARY = (("CUTLASS", r"cutlass"), ("cuDNN", r"cudnn|implicit_gemm|xmma_fprop|xmma_dgrad|xmma_wgrad|winograd"),
           ("cuBLAS", r"cublas|gemm|gemv|ampere_|sm\d\d_xmma|volta_|turing_"), ("Triton", r"^triton_|triton"),
           ("FlashAttention", r"flash|fmha"), ("PyTorch", r"at::native|at::cuda"))
SHORT = 90  # characters of a shown name


def precision(name: str) -> str | None:
    """FP64, TF32, BF16, FP16, INT8, FP8 or FP32 where the name says it; None where it does not."""
    return next((p for p, pattern in PRECISION if re.search(pattern, name, re.IGNORECASE)), None)


def library(name: str) -> str | None:
    """The library the kernel comes from where its name says it; None otherwise."""
    return next((lib for lib, pattern in LIBRARY if re.search(pattern, name, re.IGNORECASE)), None)


def shown(short: str, full: str | None) -> str:
    """The name to show: the short one where it says enough, else the full one without its argument list and
    namespaces beyond the first, cut to SHORT characters (the template's own name and first arguments)."""
    if not full or full == short or len(short) > 12:
        return short
    text = re.sub(r"\(.*\)$", "", full)  # the parameter list says nothing a reader needs
    text = re.sub(r"^void ", "", text)
    text = re.sub(r"\s+", " ", text)
    return text if len(text) <= SHORT else text[:SHORT - 3] + "..."
