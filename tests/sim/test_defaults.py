"""The engine's own limits: vLLM V1's --max-num-seqs default follows the GPU, a set flag wins."""

from __future__ import annotations

import pytest

from diagnosd.sim.model import capacity, max_num_seqs
from diagnosd.sim.spec import GpuSpec, ModelSpec, PodKnobs

H100 = GpuSpec()
H200 = GpuSpec(model="NVIDIA H200", fb_total_mib=143771.0)
MI300X = GpuSpec(model="AMD Instinct MI300X", fb_total_mib=196592.0)
A100_80 = GpuSpec(model="NVIDIA A100-SXM4-80GB", fb_total_mib=81920.0)
L40S = GpuSpec(model="NVIDIA L40S", fb_total_mib=46068.0)


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [(H100, 1024), (H200, 1024), (MI300X, 1024), (A100_80, 256), (L40S, 256)],
    ids=["h100", "h200", "mi300x", "a100-80gb", "l40s"],
)
def test_vllm_v1_picks_its_batch_by_the_gpu(gpu: GpuSpec, expected: int) -> None:
    """EngineArgs.get_batch_defaults: 1024 on >= 70 GiB other than A100 (PR #17885), else 256."""
    k = PodKnobs()
    assert max_num_seqs(k, capacity(k, ModelSpec(), gpu)) == expected


def test_a_set_flag_wins_over_the_default() -> None:
    k = PodKnobs(max_num_seqs=64)
    assert max_num_seqs(k, capacity(k, ModelSpec(), H100)) == 64


def test_v0_keeps_256_and_the_default_never_exceeds_the_batched_tokens() -> None:
    k = PodKnobs()
    assert max_num_seqs(k, capacity(k, ModelSpec(), H100, names="v0")) == 256
    small = PodKnobs(max_num_batched_tokens=512)
    assert max_num_seqs(small, capacity(small, ModelSpec(), H100)) == 512


def test_sglang_derives_its_limit_from_the_kv_pool() -> None:
    """ModelRunner._resolve_max_num_reqs: 512 per context of pool tokens within 2048-4096, at most
    one request per two pool tokens."""
    k = PodKnobs(max_model_len=32768)
    cap = capacity(k, ModelSpec(), H100, engine="sglang")
    assert max_num_seqs(k, cap) == min(max(min(int(cap.kv_tokens / 32768 * 512), 4096), 2048), int(cap.kv_tokens) // 2)
    tiny = capacity(k, ModelSpec(weights_gib=70.0), H100, engine="sglang")  # a pool of one block
    assert max_num_seqs(k, tiny) == int(tiny.kv_tokens) // 2 < 2048
