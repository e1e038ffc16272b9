// Block-scaled fp8 mainloop of a consumer (SCALE_MODE 1, the DeepSeek-V3 recipe; BLOCK_K = 128 =
// the scale block):
//
//   D = act(alpha · Σ_kb SA[m, kb] · SB[n / 128, kb] · (A_kb · B_kb) + ...)
//
// SA (M × ceil(K/128) fp32, one scale per row and k-block) arrives by TMA
// with each stage: one extra 128-float box (rows m0..m0+127 of k-block kb;
// SA is M-major in memory, so the box is 512 contiguous bytes) on the same
// full[s] barrier (expect_tx + 512), in a per-stage slot after the C
// buffers.  SB (ceil(N/128) × ceil(K/128) fp32, any strides) is read with
// ld.global.cg, one float per k-block (BLOCK_N <= 128: a tile lies inside
// one 128-column block), BS_SB_AHEAD k-blocks before it is used so that its
// latency hides behind the MMAs.  Per k-block each consumer runs its wgmmas into a
// temporary accumulator (scale-d 0 at the first k-step), reads its two
// rows' SA (row0, row0 + 8 of each warp's 16-row slice, as in the
// epilogue), waits for them, releases the stage (after fence.proxy.async:
// the SA slot was read through the generic proxy and TMA rewrites it) and
// promotes in fp32 registers: acc += tmp · (SA[row] · SB).  The fp8 tensor
// core's limited accumulator precision thus only ever sums 128 products.
// Cooperative tiles use two temporaries (BS_TWO_TMP): k-block kb + 1's
// wgmmas are issued into the other one before kb is waited for
// (wait_group 1) and promoted, so the tensor pipe keeps working through the
// promotion (measured on the H200: +6-11% at 4096×7168×16384 and 4096×4096×7168;
// results bit-identical to one temporary: the same operations in the same order).
// Ping-pong keeps one temporary and waits with wait_group 0.  Registers: acc + tmp =
// 2 · kHalves · BLOCK_N / 2 <= 128 per thread (+ 64 for the second temporary of 128×128), so
// 128×128 cooperative or 128×64 (cooperative or ping-pong); 128×256 and 128×128 ping-pong would
// need 256 (static_assert).  Out-of-bounds SA rows (M not a multiple of
// 128) are TMA zero-fills, multiplied by the zero-filled rows of A (never
// NaN·0 unless the user's scales are NaN/inf); ghost columns (a 1×2
// cluster's tile at or right of N) read SB as 0, their B rows are zeros.
// Split-K: each split promotes its own k-blocks (global index kb_begin +
// kb for SA and SB).  Clusters: SA is loaded by each CTA for itself (never
// multicast), only A/B tiles are shared as usual.
//
// Its part of the barrier contract is the plain mainloop's (gemm_consumer.cuh): full[s] waited
// with parity phase, one empty[s] arrive per warp (per CTA of the cluster) once the k-block's
// wgmmas are complete, turn[c ^ 1] at the unit's last stage (ping-pong); the stage's SA slot is
// read between the two.
//
// This file is the block-scaled kernels' mainloop of a unit, included inside the consumers' unit
// loop in place of the plain mainloop (gemm_consumer.cuh); it leaves the unit's promoted sum in acc.
{
    // Block-scaled mainloop: per k-block, wgmmas into a temporary, wait, promote into acc
    // (see the top of this file).  acc restarts at zero for every unit.
    const u32 srow = warp * 16u + lane / 4u;     // this thread's rows in a half: srow, srow + 8
    const bool cols_in = n0 < N;                 // false only for a 1x2 cluster's ghost column
    const float* sb_unit = sb + (size_t)(b_batched ? tc.l : 0) * (size_t)sb_l +
                           (size_t)(n0 / 128) * (size_t)sb_n;
#pragma unroll
    for (u32 hh = 0; hh < kHalves; ++hh)
#pragma unroll
        for (u32 i = 0; i < kAccRegs; ++i) acc[hh][i] = 0.f;
    // SB, one float per k-block for the whole tile, read from L2 kBsSbAhead k-blocks
    // before it is used: sbq[q] is the scale of k-block kb + q.
    const int kbn = w.kb_count;
    auto sb_load = [&](int kb) -> float {
        return (cols_in && kb < kbn) ? ld_cg_f32(sb_unit + (size_t)(w.kb_begin + kb) * (size_t)sb_k)
                                     : 0.f;
    };
    float sbq[kBsSbAhead + 1];
#pragma unroll
    for (int q = 0; q < kBsSbAhead; ++q) sbq[q] = sb_load(q);
    // Wait for the next stage, read its two rows' SA per half, issue its wgmmas into t
    // (scale-d 0 at the first k-step); returns the stage and advances the ring.
    auto issue = [&](float (&t)[kHalves][kAccRegs], int kb, float (&sa0)[kHalves],
                     float (&sa1)[kHalves]) -> u32 {
        mbar_wait(full(stage), phase, "full (mainloop ring)");
        if (kPingPong && kb == kbn - 1 && tid == 0) mbar_arrive(turn(c ^ 1u));
#pragma unroll
        for (u32 hh = 0; hh < kHalves; ++hh) {
            const u32 half = kPingPong ? hh : c;
            sa0[hh] = ld_shared_f32(smem_sa(stage) + (half * 64u + srow) * 4u);
            sa1[hh] = ld_shared_f32(smem_sa(stage) + (half * 64u + srow + 8u) * 4u);
        }
        wgmma_fence();
        mma_kblock(t, stage, false);
        wgmma_commit();
        const u32 s = stage;
        if (++stage == kStages) { stage = 0; phase ^= 1u; }
        return s;
    };
    // k-block kb's wgmmas (into t, from stage s) are complete: free the stage (after
    // fence.proxy.async: the SA slot was read through the generic proxy and the
    // producer's next TMA write into it is an async-proxy write), then promote in fp32,
    // one fma.rn.f32 per register: register i of a half holds row srow + 8 * ((i / 2) % 2)
    // (the accumulator layout the epilogue reads too).
    // (The fence is a MEMBAR.ALL.CTA in SASS every k-block; measured on the H200 without it:
    // 0.987-1.010 with identical results, so it stays.  Reading SB after it instead of before
    // ran no faster.)
    auto retire = [&](const float (&t)[kHalves][kAccRegs], u32 s, const float (&sa0)[kHalves],
                      const float (&sa1)[kHalves]) {
        fence_proxy_async_smem();
        if (lane == 0) release_stage(empty(s));
        const float sbv = sbq[0];
#pragma unroll
        for (int q = 0; q < kBsSbAhead; ++q) sbq[q] = sbq[q + 1];
#pragma unroll
        for (u32 hh = 0; hh < kHalves; ++hh) {
            const float s0 = sa0[hh] * sbv, s1 = sa1[hh] * sbv;
#pragma unroll
            for (u32 i = 0; i < kAccRegs; ++i) acc[hh][i] += t[hh][i] * ((i & 2u) ? s1 : s0);
        }
    };
    if constexpr (kBsTwoTmp) {
        // Two temporaries, roles fixed by unrolling by 2: k-block kb (even) in tmp, kb + 1 in
        // tmp2.  k-block kb + 1's wgmmas are issued before kb is promoted (wait_group 1: kb's
        // group is complete, kb + 1's may run on), so the tensor pipe has work while this
        // consumer waits and promotes.  The consumer holds at most two stages.  SB is read
        // kBsSbAhead (here 1) promotions ahead, before each promotion instead of before each
        // issue.
        float sa0a[kHalves], sa1a[kHalves], sa0b[kHalves], sa1b[kHalves];
        u32 s_a = 0, s_b = 0;
        // k-block kb's wgmmas (into t) are complete (the caller waited): pin t, read SB
        // kBsSbAhead promotions ahead, release the stage and promote.
        auto finish = [&](float (&t)[kHalves][kAccRegs], u32 s, const float (&sa0)[kHalves],
                          const float (&sa1)[kHalves], int kb) {
            fence_operand(t);
            sbq[kBsSbAhead] = sb_load(kb + kBsSbAhead);
            retire(t, s, sa0, sa1);
        };
        // The steady state has no conditional issue (a wgmma result merged from two paths
        // would make the compiler copy registers an in-flight wgmma writes: C7514); the
        // last one or two k-blocks drain after the loop.
        if (kbn > 0) {
            s_a = issue(tmp, 0, sa0a, sa1a);
            int kb = 0;
            for (; kb + 2 < kbn; kb += 2) {
                s_b = issue(tmp2, kb + 1, sa0b, sa1b);
                wgmma_wait<1>();
                finish(tmp, s_a, sa0a, sa1a, kb);
                s_a = issue(tmp, kb + 2, sa0a, sa1a);
                wgmma_wait<1>();
                finish(tmp2, s_b, sa0b, sa1b, kb + 1);
            }
            if (kb + 1 < kbn) {                  // two k-blocks left: kb in flight, issue kb + 1
                s_b = issue(tmp2, kb + 1, sa0b, sa1b);
                wgmma_wait<1>();
                finish(tmp, s_a, sa0a, sa1a, kb);
                wgmma_wait<0>();
                finish(tmp2, s_b, sa0b, sa1b, kb + 1);
            } else {                             // one k-block left, in flight
                wgmma_wait<0>();
                finish(tmp, s_a, sa0a, sa1a, kb);
            }
        }
    } else {
        for (int kb = 0; kb < kbn; ++kb) {
            sbq[kBsSbAhead] = sb_load(kb + kBsSbAhead);
            float sa0[kHalves], sa1[kHalves];
            const u32 s = issue(tmp, kb, sa0, sa1);
            wgmma_wait<0>();
            retire(tmp, s, sa0, sa1);
        }
    }
}
