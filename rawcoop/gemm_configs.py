"""GEMM kernel configurations: what is compiled (KernelSpec), how much shared
memory each needs, and the simple rule that picks one per problem."""
from __future__ import annotations

from dataclasses import dataclass

from .compiler import KernelSpec

BLOCK_M = 128
BLOCK_K = 64
THREADS = 384
ELEM = 2
SMEM_LIMIT = 232448          # sm_90 opt-in shared memory per block
EPI_BYTES = 2 * 2 * 64 * 64 * ELEM   # 2 consumers x 2 staging buffers of 64x64


@dataclass(frozen=True)
class GemmConfig:
    block_n: int
    stages: int
    bf16: bool

    @property
    def smem_bytes(self) -> int:
        """Mirrors kSmemBytes in kernels/gemm.cu."""
        stage = (BLOCK_M + self.block_n) * BLOCK_K * ELEM
        return self.stages * stage + EPI_BYTES + 2 * self.stages * 8 + 1024

    @property
    def spec(self) -> KernelSpec:
        return KernelSpec.make("gemm.cu", "gemm_tn", BLOCK_N=self.block_n, STAGES=self.stages,
                               DTYPE_BF16=int(self.bf16))


def max_stages(block_n: int) -> int:
    stage = (BLOCK_M + block_n) * BLOCK_K * ELEM
    return (SMEM_LIMIT - EPI_BYTES - 1024 - 64) // stage


def config(block_n: int, bf16: bool) -> GemmConfig:
    return GemmConfig(block_n, min(max_stages(block_n), 8), bf16)


BLOCK_NS = (128, 256)


def all_configs() -> list[GemmConfig]:
    return [config(bn, bf) for bn in BLOCK_NS for bf in (True, False)]


def all_specs() -> list[KernelSpec]:
    return [c.spec for c in all_configs()]


def choose(m: int, n: int, k: int, bf16: bool, sm_count: int) -> GemmConfig:
    """Simple rule for now: 128x256 tiles when they still give every SM a
    tile, else 128x128 (more, smaller tiles for small problems)."""
    tiles_256 = -(-m // BLOCK_M) * -(-n // 256)
    return config(256 if tiles_256 >= sm_count else 128, bf16)


def expected_instructions(spec: KernelSpec) -> list[str]:
    d = dict(spec.defines)
    t = "bf16" if d["DTYPE_BF16"] else "f16"
    return [f"wgmma.mma_async.sync.aligned.m64n{d['BLOCK_N']}k16.f32.{t}.{t}",
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
            "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group",
            "setmaxnreg.dec.sync.aligned.u32 40", "setmaxnreg.inc.sync.aligned.u32 232",
            "wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned",
            "mbarrier.try_wait.parity", "mbarrier.arrive.expect_tx", "fence.proxy.async.shared::cta",
            "cvt.rn." + t + "x2.f32"]
