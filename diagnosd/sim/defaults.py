"""The limits an engine picks for itself at start when its flags leave them unset.

vLLM V1 sizes its batch by the hardware it finds (EngineArgs.get_batch_defaults, for the
OpenAI-compatible server): 1024 sequences on a GPU with at least 70 GiB other than an A100
(H100, H200, MI300X), 256 elsewhere, never more than --max-num-batched-tokens. V0 kept 256
everywhere. SGLang derives --max-running-requests from its KV pool (ModelRunner's
_resolve_max_num_reqs): 512 requests per context length of pool tokens, within 2048-4096, and
at most one per two pool tokens.
"""

from __future__ import annotations

from diagnosd.sim.spec import EngineKind, GpuSpec, Names

MIB = 1 << 20
GIB = 1 << 30


def large_gpu(gpu: GpuSpec) -> bool:
    """vLLM's test for its bigger batch defaults (an A100 80GB is excluded: PR #17885 measured
    a throughput regression there)."""
    return gpu.fb_total_mib * MIB >= 70 * GIB and "a100" not in gpu.model.lower()


def max_num_seqs(engine: EngineKind, names: Names, gpu: GpuSpec, kv_tokens: float, context_len: int) -> int:
    """The running-request limit the engine chose itself."""
    if engine == "sglang":
        estimated = max(min(int(kv_tokens / context_len * 512), 4096), 2048)
        return max(1, min(estimated, int(kv_tokens) // 2))
    if names == "v0":
        return 256
    return 1024 if large_gpu(gpu) else 256
