// Producer warpgroup of gemm_kernel (WG0, setmaxnreg 40): the TMA loads of the mainloop ring and
// of the epilogue's C chunks.
//
// Its part of the barrier contract:
//   warp 0, lane 0, per k-block of every unit of the CTA's walk, ring position (stage, phase):
//     wait empty[stage] with parity phase ^ 1 (the first pass falls through), arrive.expect_tx on
//     full[stage] with the stage's bytes (+ the SA box when block-scaled), issue the TMA loads;
//     after the first one arrive on first_load.  In a cluster it loads half of the shared operand
//     tile and multicasts it (load_operand_multicast): the peer's half lands on our full[stage]
//     too, so the expected bytes are the whole stage's either way.  Trimmed boxes
//     (trimmed_lines): the bytes a stage really receives when an operand has fewer rows than
//     its tile.
//   warp 1 + c, lane 0 (HAS_C), consumer c's C loader: after first_load, per epilogue chunk in the
//     order consumer c's epilogue reads them (epilogue_chunks), wait c_empty[c][b] with parity
//     ph ^ 1, arrive.expect_tx on c_full[c][b], TMA-load the chunk.
//
// This file is the body of the producer's branch of gemm_kernel, included inside it (the role
// code stays in the kernel's body: NVVM simplifies a called function on its own before inlining
// it, which changes the generated code).  It uses the kernel's locals: the address lambdas of
// gemm.cu, the tensor maps, M, N, the schedule (first_unit, unit_step, units, work_unit's
// arguments), rank, rank_m, rank_n, the batch flags and spread.
setmaxnreg_dec<40>();
const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
if (warp == 0 && lane == 0) {
    // ---------------------------------------------- mainloop loads
    u32 stage = 0, phase = 0;
    bool first = true;
    // Trimmed boxes (gemm_ops.cuh): the bytes one stage really receives.
    const u32 stage_bytes = (trimmed_lines<kAKMajor>(M, kBlockM) + trimmed_lines<kBKMajor>(N, kBlockN)) *
                            (kBlockK * kInBytes);
    for (int u = first_unit; u < units; u += unit_step) {
        const WorkUnit w = work_unit(u, tiles_m, tiles_n, group, tiles_dp, splits, k_blocks, tiles);
        const TileCoord tc = w.tc;
        const int m0 = (tc.m * kClusterM + int(rank_m)) * kBlockM;
        const int n0 = (tc.n * kClusterN + int(rank_n)) * kBlockN;
        const int la = a_batched ? tc.l : 0, lb = b_batched ? tc.l : 0;
        for (int kb = w.kb_begin; kb < w.kb_begin + w.kb_count; ++kb) {
            const int k0 = kb * kBlockK;
            mbar_wait(empty(stage), phase ^ 1u, "empty (mainloop ring)");
#if RC_BLOCK_SCALED
            // + this CTA's own A scales of the k-block (never multicast): 128 rows from m0
            mbar_arrive_expect_tx(full(stage), stage_bytes + kSABytes);
            tma_load_3d(smem_sa(stage), &map_sa, full(stage), m0, kb, la);
#else
            mbar_arrive_expect_tx(full(stage), stage_bytes);
#endif
            if constexpr (kClusterN > 1)
                load_operand_multicast<kAKMajor, kBlockM>(smem_a(stage), &map_a, full(stage), k0, m0, la, rank);
            else
                load_operand<kAKMajor, kBlockM>(smem_a(stage), &map_a, full(stage), k0, m0, la);
            if constexpr (kClusterM > 1)
                load_operand_multicast<kBKMajor, kBlockN>(smem_b(stage), &map_b, full(stage), k0, n0, lb, rank);
            else
                load_operand<kBKMajor, kBlockN>(smem_b(stage), &map_b, full(stage), k0, n0, lb);
            if (first) { mbar_arrive(first_load); first = false; }
            if (++stage == kStages) { stage = 0; phase ^= 1u; }
        }
    }
    griddep_launch_dependents();             // all our loads are issued
} else if (kHasC && warp >= 1 && warp <= kConsumers && lane == 0) {
    // ---------------------------------------------- epilogue C loads
    // Warp 1 + c loads consumer c's chunks of C into its double buffer,
    // in exactly the order consumer c's epilogue reads them; it starts
    // after the first mainloop load was issued (first_load).
    const u32 c = warp - 1;
    mbar_wait(first_load, 0, "first_load");
    u32 e = 0;                               // consumer c's chunk counter
    int j = 0;                               // position in this CTA's unit sequence
    for (int u = first_unit; u < units; u += unit_step, ++j) {
        if (kPingPong && (u32(j) & 1u) != c) continue;
        const WorkUnit w = work_unit(u, tiles_m, tiles_n, group, tiles_dp, splits, k_blocks, tiles);
        if (kStreamK && w.kb_count == 0) continue;   // stream-K: an empty unit
        // The epilogue's chunks of this unit: all of a tile's for its last
        // unit (chain), this split's share (spread), none otherwise.
        const ChunkRange chunks = epilogue_chunks(w, spread);
        if (!chunks.spread && w.split != w.splits - 1) continue;
        const TileCoord tc = w.tc;
        const int m0 = (tc.m * kClusterM + int(rank_m)) * kBlockM;
        const int n0 = (tc.n * kClusterN + int(rank_n)) * kBlockN;
        const int lc = c_batched ? tc.l : 0;
#pragma unroll 1
        for (u32 hh = 0; hh < kHalves; ++hh) {
            const int row = m0 + int(64 * (kPingPong ? hh : c));
            for (u32 jj = chunks.lo; jj < chunks.hi; ++jj, ++e) {
                const int col = n0 + int(jj * kEpiCols);
                if (col >= N) break;
                const u32 b = e % kEpiBuffers, ph = (e / kEpiBuffers) & 1u;
                mbar_wait(c_empty(c, b), ph ^ 1u, "c_empty (epilogue C buffers)");
                if constexpr (!kCColMajor) {
                    if (kNarrowBox) {                  // only the chunk's own narrow boxes
                        const u32 boxes = chunk_cols(jj) / kBoxCols;
                        mbar_arrive_expect_tx(c_full(c, b), boxes * kBoxBytes);
                        for (u32 x = 0; x < boxes; ++x)
                            tma_load_3d(c_buf(c, b) + x * kBoxBytes, &map_c, c_full(c, b),
                                        col + int(x * kBoxCols), row, lc);
                        continue;
                    }
                }
                mbar_arrive_expect_tx(c_full(c, b), kEpiBytes);
                if constexpr (kCColMajor && kOutType == 2) {
                    // two 32-row boxes (the second's rows may lie past M: zero-filled, still 4 KB)
                    tma_load_3d(c_buf(c, b), &map_c, c_full(c, b), row, col, lc);
                    tma_load_3d(c_buf(c, b) + 4096u, &map_c, c_full(c, b), row + 32, col, lc);
                } else if constexpr (kCColMajor) {
                    tma_load_3d(c_buf(c, b), &map_c, c_full(c, b), row, col, lc);
                } else {
                    tma_load_3d(c_buf(c, b), &map_c, c_full(c, b), col, row, lc);
                }
            }
        }
    }
}
