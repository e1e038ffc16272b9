"""Every kernel configuration rawcoop can launch, for warm-up and the CPU
compile tests.  Each op module contributes its ``all_specs()``."""
from __future__ import annotations

from .compiler import KernelSpec


def all_specs(everything: bool = False) -> list[KernelSpec]:
    """The default warm-up set; ``everything`` adds the epilogue-variant
    covering set (C, bias, activations, output types, swap-AB epilogues)."""
    from . import tile_copy
    specs: list[KernelSpec] = []
    specs += tile_copy.all_specs()
    from .plan import builds
    specs += builds.all_specs(everything)
    return specs


def expected_instructions(spec: KernelSpec) -> list[str]:
    """PTX mnemonics each kernel must contain (checked by the CPU tests)."""
    if spec.name == "tile_replicate":
        want = ["cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
                "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group",
                "mbarrier.try_wait.parity", "mbarrier.arrive.expect_tx", "cp.async.bulk.wait_group.read"]
        if dict(spec.defines)["CLUSTER"] > 1:
            want += ["multicast::cluster", "mapa.shared::cluster", "barrier.cluster.arrive"]
        return want
    from .plan import builds
    return builds.expected_instructions(spec)
