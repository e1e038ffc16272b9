// Consumer warpgroups of gemm_kernel (WG1.., setmaxnreg 232, or 152 with three consumers): the
// wgmma mainloop over the ring; then the unit's split-K fix-up and epilogue (gemm_epilogue.cuh).
//
// Cooperative (PINGPONG 0): every consumer works on every unit; consumer c owns rows [64c, 64c+64)
// of the tile.  Ping-pong (PINGPONG 1): consumer c takes the units at positions j of the CTA's
// walk with j % 2 == c and owns both 64-row halves of them; it skips the other consumer's stages
// of the ring, so one consumer's mainloop runs while the other runs its epilogue.
//
// Its part of the barrier contract, per k-block at ring position (stage, phase):
//   wait full[stage] with parity phase; issue four (cooperative) or eight (ping-pong) wgmmas, commit;
//   once the previous k-block's batch is complete (wait_group 1) release its stage: one arrive per
//   warp on empty[s'] in every CTA of the cluster (release_stage).  Ping-pong: seeing the last
//   stage of its unit full, consumer c arrives on turn[c ^ 1]; before each unit but its first it
//   waits on turn[c] (a full[] wait by parity is only unambiguous once the stage's previous fill
//   has completed, which the other consumer's hand-over guarantees).  The ring position advances
//   over every unit of the walk, the other consumer's included, exactly as the producer's does.
//
// This file is the body of the consumers' branch of gemm_kernel, included inside it (see
// gemm_producer.cuh for why); it uses the kernel's locals as gemm_producer.cuh does, and defines
// the ones gemm_block_scale.cuh and gemm_epilogue.cuh use: c, tid, warp, lane, epi, alpha_scaled,
// acc (tmp, tmp2), the ring position (stage, phase), the chunk counter e, and per unit w, tc, m0, n0.
setmaxnreg_inc<kConsumerRegs>();
// UNIFORM_CONSUMER: the consumer index through warp_uniform, so that ptxas keeps the state that
// depends on it on the uniform datapath.
const u32 c = kUniformConsumer ? warp_uniform(wg - 1) : wg - 1;
const u32 tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
const u32 epi = base + kOffEpi + c * kEpiBuffers * kEpiBytes;
#if RC_FP8 && !RC_BLOCK_SCALED
// alpha · scale_a · scale_b, read once per thread (after griddepcontrol.wait, through L2:
// a previous kernel may just have written them).  The scales live on the device, so new
// values need neither a recompile nor a new plan, and CUDA graph replays read them anew.
const float alpha_scaled =
    alpha * (scale_a ? ld_cg_f32(scale_a) : 1.f) * (scale_b ? ld_cg_f32(scale_b) : 1.f);
#else
const float alpha_scaled = alpha;
#endif
float acc[kHalves][kAccRegs];
#pragma unroll
for (u32 hh = 0; hh < kHalves; ++hh)
#pragma unroll
    for (u32 i = 0; i < kAccRegs; ++i) acc[hh][i] = 0.f;
#if RC_BLOCK_SCALED
float tmp[kHalves][kAccRegs];                // one k-block's wgmma results, before promotion
#pragma unroll
for (u32 hh = 0; hh < kHalves; ++hh)
#pragma unroll
    for (u32 i = 0; i < kAccRegs; ++i) tmp[hh][i] = 0.f;
float tmp2[kHalves][kAccRegs];               // the odd k-blocks' temporary (two temporaries only)
if constexpr (kBsTwoTmp) {
#pragma unroll
    for (u32 hh = 0; hh < kHalves; ++hh)
#pragma unroll
        for (u32 i = 0; i < kAccRegs; ++i) tmp2[hh][i] = 0.f;
}
#endif

u32 stage = 0, phase = 0, e = 0;         // ring position; epilogue chunk counter
[[maybe_unused]] u32 tl_n = 0;           // units stamped so far (RC_TIMELINE)
u32 turn_phase = 0;                      // ping-pong: hand-overs received
int j = 0;                               // position in this CTA's unit sequence
for (int u = first_unit; u < units; u += unit_step, ++j) {
    const WorkUnit w = work_unit(u, tiles_m, tiles_n, group, tiles_dp, splits, k_blocks, tiles);
    if (kStreamK && w.kb_count == 0) continue;   // stream-K: an empty unit (no stages, no epilogue)
    if (kEpiRing && (j > 0 || w.splits > 1)) asm volatile("trap;");   // the host's promise broken
    if (kPingPong && (u32(j) & 1u) != c) {
        // The other consumer's unit: skip its stages of the ring.
        const u32 pos = stage + u32(w.kb_count);
        stage = pos % kStages;
        phase ^= (pos / kStages) & 1u;
        continue;
    }
    const TileCoord tc = w.tc;
    const int m0 = (tc.m * kClusterM + int(rank_m)) * kBlockM;
    const int n0 = (tc.n * kClusterN + int(rank_n)) * kBlockN;

    // -------------------------------------------------- mainloop
    // Ping-pong hand-over: a full[] wait by parity is only unambiguous
    // when the stage's previous fill has completed, so consumer c starts
    // on unit j only after the other consumer has seen the last stage of
    // unit j-1 full (turn[c]); then every earlier fill is complete.
    if (kPingPong && j > 0) {
        mbar_wait(turn(c), turn_phase, "turn (ping-pong hand-over)");
        turn_phase ^= 1u;
    }
    RC_STAMP(0, u64(u));
    RC_STAMP(1, RC_NOW);
    // One k-block's wgmmas on stage s into d (this consumer's halves); the
    // block's first k-step adds to d only when `accumulate` (else it starts d).
    auto mma_kblock = [&](float (&d)[kHalves][kAccRegs], u32 s, bool accumulate) {
#pragma unroll
        for (u32 k = 0; k < kKSteps; ++k) {
#pragma unroll
            for (u32 hh = 0; hh < kHalves; ++hh) {
                const u32 half = kPingPong ? hh : c;
                const u64 da = kAKMajor ? smem_desc_k128(smem_a(s) + half * 64u * 128u + 32u * k)
                                        : smem_desc_mn128(smem_a(s) + half * kAtomBytes + 2048u * k, kAtomBytes);
                const u64 db = kBKMajor ? smem_desc_k128(smem_b(s) + 32u * k)
                                        : smem_desc_mn128(smem_b(s) + 2048u * k, kAtomBytes);
                RC_WGMMA_TILE(d[hh], da, db, (accumulate || k > 0) ? 1u : 0u);
            }
        }
    };
#if RC_BLOCK_SCALED
#include "gemm_block_scale.cuh"
#else
    u32 prev = 0;
    for (int kb = 0; kb < w.kb_count; ++kb) {
        mbar_wait(full(stage), phase, "full (mainloop ring)");
        if (kPingPong && kb == w.kb_count - 1 && tid == 0) mbar_arrive(turn(c ^ 1u));
        wgmma_fence();
        mma_kblock(acc, stage, kb > 0);
        wgmma_commit();
        if (kb > 0) {                    // the previous batch is done: free its stage
            wgmma_wait<1>();
            if (lane == 0) release_stage(empty(prev));
        }
        prev = stage;
        if (++stage == kStages) { stage = 0; phase ^= 1u; }
    }
    wgmma_wait<0>();
    if (lane == 0) release_stage(empty(prev));
#endif

#include "gemm_epilogue.cuh"
}
if (tid == 0) tma_store_wait_all();
