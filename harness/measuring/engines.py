"""The in-process engines of ceilings and references: an onnxruntime CPU session as checks and
benchmarks build it, and which of the CPU's instruction sets the engines care about."""

from __future__ import annotations


def cpu_flags() -> list[str]:
    """The instruction sets of this CPU that OpenVINO and onnxruntime kernels choose by."""
    with open("/proc/cpuinfo") as f:
        flags = set(next((l for l in f if l.startswith("flags")), "").split(":", 1)[-1].split())
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "avx512_fp16")
    return [f for f in wanted if f in flags]


def cpu_session(path: str, threads: int = 1):
    """An onnxruntime CPU session of ``path``: ``threads`` intra-op threads, one inter-op."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
