// Consumer epilogue of a unit of gemm_kernel: the split-K / stream-K fix-up of the unit's
// accumulators, then D = act(alpha · acc + beta · C + bias) converted to the output type and
// TMA-stored chunk by chunk.
//
// Its part of the barrier contract:
//   c_full[c][b]   waited (parity (e / buffers) & 1, the chunk counter e's pass over consumer c's
//                  buffers) before reading C from buffer b = e % buffers; c_empty[c][b] arrived
//                  once per warp after reading it (after fence.proxy.async: the C loader's next TMA
//                  write is an async-proxy write).
//   named barrier 1 + c (consumer c's 128 threads): around every staging-buffer write and around
//                  the split-K workspace stores; 1 + consumers (all consumers): EPI_RING's hand-over
//                  of the ring's A stages.
//   Staging buffers: one bulk group per stored chunk; a buffer is rewritten only after
//                  cp.async.bulk.wait_group.read says its last store has read it.
//   Split-K flags (global, one per slot): release/acquire counters, below.
// The C loader (gemm_producer.cuh) walks the same chunks in the same order (epilogue_chunks).
//
// This file is the end of the consumers' unit loop (gemm_consumer.cuh), included inside it: a
// chain split that hands its partial on ends the unit here (`continue`).
// -------------------------------------------------- split-K fix-up
// Per (tile, rank, consumer) there is a flag and workspace of 64 x BLOCK_N fp32
// per slot.  The order of the sum is fixed by the schedule, so results
// are bit-identical run to run.
//   spread (cooperative kernels whose splits of a tile all run at
//   once, see `spread` in gemm.cu): split s stores its partial of the chunks
//   the others own into its own slot (S slots), counts the flag up and
//   waits until all S did; then it sums its own chunks
//   [s·C/S, (s+1)·C/S): its registers first, then the
//   other splits' slots in split order (in place: no second register
//   tile), and runs the epilogue on them.  A second count after the
//   wait tells the last split that every split is past it: it zeroes
//   the flag for the next launch.  Every split waits only for splits
//   of its own round, which are running (their CTAs are past every
//   earlier round, no earlier unit waits), so nothing deadlocks.
//   chain (ping-pong, stream-K, or splits that straddle rounds): one
//   slot, ((p0 + p1) + p2) + p3; split 0 stores its partial, split s waits until flag == s,
//   adds the slot into its registers and stores the sum or, as the
//   last split, runs the epilogue on the whole tile.  Units of one tile
//   are consecutive and every CTA of the persistent grid is resident; a
//   unit only waits on lower-numbered units, and the lowest unfinished
//   unit never waits (its CTA's ring holds its stages in order).
// The chunks this unit's epilogue stores: a share of the tile (spread
// split-K) or all of it.  Computed here from the unit alone, not inside
// the fix-up's branches: assigned there, ptxas no longer proved the
// epilogue's chunk tests uniform and moved the mainloop's descriptor and
// ring arithmetic off the uniform datapath (block-scaled fp8 ran ~10%
// slower on the H200).
RC_STAMP(2, RC_NOW);
const ChunkRange chunks = epilogue_chunks(w, spread);
const u32 ch_lo = chunks.lo, ch_hi = chunks.hi;
if (w.splits > 1) {
    // This consumer's slot: its half (cooperative), or the tile's
    // first half (ping-pong: slots slot and slot + 1, one flag).
    const int slot = ((w.tile - tiles_dp) * kCluster + int(rank)) * int(kConsumers) +
                     int(kPingPong ? 0u : c);
    int* flag = flags + slot;
#if RC_SPREAD   // not `if constexpr`: the call would emit spread_count_and_wait (and its watchdog string) everywhere
    if (chunks.spread) {
        const int S = w.splits, me = w.split;
        float* ws = workspace + (size_t)slot * size_t(S) * (64 * kBlockN);   // slot p at ws + p·64·BLOCK_N
        float* mine = ws + (size_t)me * (64 * kBlockN);
#pragma unroll
        for (u32 jc = 0; jc < kChunks; ++jc) {
            if (jc >= ch_lo && jc < ch_hi) continue;
#pragma unroll
            for (u32 i = jc * (kChunkRegs / 4); i < jc * (kChunkRegs / 4) + chunk_cols(jc) / 8; ++i)
                st_cg_f32x4(mine + (i * 128u + tid) * 4u, acc[0][4 * i], acc[0][4 * i + 1],
                            acc[0][4 * i + 2], acc[0][4 * i + 3]);
        }
        spread_count_and_wait(flag, S, c, tid, u32(slot), u32(me));   // zeroed after 2S counts
#pragma unroll
        for (u32 jc = 0; jc < kChunks; ++jc) {
            if (jc < ch_lo || jc >= ch_hi) continue;
#pragma unroll 1
            for (int p = 0; p < S; ++p) {
                if (p == me) continue;
                const float* src = ws + (size_t)p * (64 * kBlockN);
                float x[kChunkRegs];
#pragma unroll
                for (u32 q = 0; q < chunk_cols(jc) / 8; ++q)
                    ld_cg_f32x4(src + ((jc * (kChunkRegs / 4) + q) * 128u + tid) * 4u,
                                x[4 * q], x[4 * q + 1], x[4 * q + 2], x[4 * q + 3]);
#pragma unroll
                for (u32 r = 0; r < chunk_cols(jc) / 2; ++r) acc[0][jc * kChunkRegs + r] += x[r];
            }
        }
    } else
#endif
    {
        if (w.split > 0) {
            if (tid == 0) {
                RC_WATCH_START(start);
                while (ld_acquire_gpu(flag) != w.split) {
                    nanosleep_ns(64);
                    RC_WATCH(start, "split-K flag", u32(slot), u32(w.split));
                }
            }
            named_barrier_sync(1 + c, 128);
#pragma unroll
            for (u32 hh = 0; hh < kHalves; ++hh)
#pragma unroll
                for (u32 i = 0; i < kAccRegs / 4; ++i) {
                    float p0, p1, p2, p3;
                    ld_cg_f32x4(ws_chain(workspace, slot) + hh * (64 * kBlockN) + (i * 128u + tid) * 4u,
                                p0, p1, p2, p3);
                    acc[hh][4 * i] = p0 + acc[hh][4 * i];
                    acc[hh][4 * i + 1] = p1 + acc[hh][4 * i + 1];
                    acc[hh][4 * i + 2] = p2 + acc[hh][4 * i + 2];
                    acc[hh][4 * i + 3] = p3 + acc[hh][4 * i + 3];
                }
        }
        if (w.split == w.splits - 1) {
            // Last reader of this flag in this launch: leave it zeroed for
            // the next launch on the stream (the host zeroes it only once).
            if (tid == 0) st_release_gpu(flag, 0);
        } else {
#pragma unroll
            for (u32 hh = 0; hh < kHalves; ++hh)
#pragma unroll
                for (u32 i = 0; i < kAccRegs / 4; ++i)
                    st_cg_f32x4(ws_chain(workspace, slot) + hh * (64 * kBlockN) + (i * 128u + tid) * 4u,
                                acc[hh][4 * i], acc[hh][4 * i + 1], acc[hh][4 * i + 2], acc[hh][4 * i + 3]);
            named_barrier_sync(1 + c, 128);  // every thread's partial is written ...
            if (tid == 0) st_release_gpu(flag, w.split + 1);   // ... before the flag moves
            RC_STAMP(3, RC_NOW);
            RC_STAMP(4, RC_NOW);
            RC_TL_NEXT();
            continue;
        }
    }
}

// -------------------------------------------------- epilogue
RC_STAMP(3, RC_NOW);
// EPI_RING: the staging buffers are A stages; every consumer's wgmmas are done with them.
if (kEpiRing) named_barrier_sync(1 + kConsumers, 128 * kConsumers);
const u32 row0 = warp * 16u + lane / 4u;     // this thread's rows in a half: row0, row0 + 8
const int ld = tc.l;
#pragma unroll
for (u32 hh = 0; hh < kHalves; ++hh) {
    const u32 half = kPingPong ? hh : c;
    const bool rows_in = m0 + int(half * 64u) < M;
    const int grow0 = m0 + int(half * 64u + row0);
#pragma unroll
    for (u32 jc = 0; jc < kChunks; ++jc) {
        if (jc < ch_lo || jc >= ch_hi) continue; // another split's share (spread split-K)
        const int col0 = n0 + int(jc * kEpiCols);
        if (col0 >= N) break;                    // uniform over the warpgroup
        const u32 cols = chunk_cols(jc);             // kEpiCols, or kTailCols for a partial chunk
        float v[kChunkRegs];
#pragma unroll
        for (u32 r = 0; r < cols / 2; ++r) v[r] = alpha_scaled * acc[hh][jc * kChunkRegs + r];
        if constexpr (kHasC) {
            const u32 b = e % kEpiBuffers, ph = (e / kEpiBuffers) & 1u;
            const u32 cb = c_buf(c, b);
            mbar_wait(c_full(c, b), ph, "c_full (epilogue C buffers)");
#pragma unroll
            for (u32 q = 0; q < cols / 8; ++q)
#pragma unroll
                for (u32 h = 0; h < 2; ++h) {
                    const u32 r = q * 4u + h * 2u, row = row0 + 8u * h;
                    const u32 cc = 8u * q + 2u * (lane & 3u);      // column inside the chunk
                    float c0, c1;
                    if constexpr (kCColMajor && kOutType == 2) {
                        c0 = ld_shared_f32(colmajor_f32(cb, row, cc));
                        c1 = ld_shared_f32(colmajor_f32(cb, row, cc + 1u));
                    } else if constexpr (kCColMajor) {
                        c0 = out16_to_f32(ld_shared_u16(swz(cb, cc, row * 2u)));
                        c1 = out16_to_f32(ld_shared_u16(swz(cb, cc + 1u, row * 2u)));
                    } else if constexpr (kOutType == 2) {
                        ld_shared_f32x2(chunk_addr(cb, row, cc * 4u), c0, c1);
                    } else {
                        const u32 p = ld_shared_u32(chunk_addr(cb, row, cc * 2u));
                        c0 = out16_to_f32((u16)(p & 0xFFFFu));
                        c1 = out16_to_f32((u16)(p >> 16));
                    }
                    v[r] += beta * c0;
                    v[r + 1] += beta * c1;
                }
            // The loader refills this buffer with a TMA load (async
            // proxy) once c_empty completes: order our generic-proxy
            // reads of it before that write (WAR across proxies).
            // Without the fence ptxas may place the arrive right
            // after the loads of the last chunk with no wait on them,
            // and the refill overwrote C still being read (fp32
            // output on the H200).
            fence_proxy_async_smem();
            syncwarp();
            if (lane == 0) mbar_arrive(c_empty(c, b));
        }
        // Row bias (BIAS_ON_ROWS): this thread's two rows, read once per chunk.
        const float bias_r0 = kBias && kBiasOnRows ? (grow0 < M ? load_bias(bias, grow0) : 0.f) : 0.f;
        const float bias_r1 = kBias && kBiasOnRows ? (grow0 + 8 < M ? load_bias(bias, grow0 + 8) : 0.f) : 0.f;
#pragma unroll
        for (u32 q = 0; q < cols / 8; ++q) {
            // Column bias: the same columns for both rows.
            const int gcol = col0 + int(8u * q + 2u * (lane & 3u));
            const float b0 = kBias && !kBiasOnRows ? (gcol < N ? load_bias(bias, gcol) : 0.f) : 0.f;
            const float b1 = kBias && !kBiasOnRows ? (gcol + 1 < N ? load_bias(bias, gcol + 1) : 0.f) : 0.f;
#pragma unroll
            for (u32 h = 0; h < 2; ++h) {
                const u32 r = q * 4u + h * 2u;
                if constexpr (kBias && kBiasOnRows) {
                    v[r] += h ? bias_r1 : bias_r0;
                    v[r + 1] += h ? bias_r1 : bias_r0;
                } else if constexpr (kBias) {
                    v[r] += b0;
                    v[r + 1] += b1;
                }
                v[r] = activate(v[r]);
                v[r + 1] = activate(v[r + 1]);
            }
        }

        // Staging buffers alternate over the chunk sequence; each
        // stored chunk commits one bulk group, so the group that last
        // read `buf` is never the newest one.  A half that starts at or
        // below row M (rows_in, uniform over the warpgroup) stores
        // nothing and commits nothing, so there tid 0 drains every
        // store's reads first (rare: the last tile row): no group is
        // pending after it, and the count holds again from the next
        // stored chunk.  (Without the drain, a buffer could be
        // rewritten while its store still read it.)
        const u32 buf = epi + (e % kEpiBuffers) * kEpiBytes;
        if (tid == 0) {                  // buf's last store has read it
            if (rows_in) tma_store_wait_read<kEpiBuffers - 1>();
            else tma_store_wait_read<0>();
        }
        named_barrier_sync(1 + c, 128);
#pragma unroll
        for (u32 q = 0; q < cols / 8; ++q)
#pragma unroll
            for (u32 h = 0; h < 2; ++h) {
                const u32 r = q * 4u + h * 2u, row = row0 + 8u * h;
                const u32 cc = 8u * q + 2u * (lane & 3u);
                if constexpr (kDColMajor && kOutType == 2) {
                    st_shared_f32(colmajor_f32(buf, row, cc), v[r]);
                    st_shared_f32(colmajor_f32(buf, row, cc + 1u), v[r + 1]);
                } else if constexpr (kDColMajor) {
                    const u32 p = pack_out16(v[r], v[r + 1]);
                    st_shared_u16(swz(buf, cc, row * 2u), (u16)(p & 0xFFFFu));
                    st_shared_u16(swz(buf, cc + 1u, row * 2u), (u16)(p >> 16));
                } else if constexpr (kOutType == 2) {
                    st_shared_f32x2(chunk_addr(buf, row, cc * 4u), v[r], v[r + 1]);
                } else {
                    st_shared_u32(chunk_addr(buf, row, cc * 2u), pack_out16(v[r], v[r + 1]));
                }
            }
        fence_proxy_async_smem();
        named_barrier_sync(1 + c, 128);
        if (tid == 0 && rows_in) {
            if constexpr (kDColMajor && kOutType == 2) {
                // two 32-row boxes in one bulk group; the second only where it has rows
                tma_store_3d(&map_d, buf, m0 + int(half * 64u), col0, ld);
                if (m0 + int(half * 64u) + 32 < M)
                    tma_store_3d(&map_d, buf + 4096u, m0 + int(half * 64u) + 32, col0, ld);
            } else if constexpr (kDColMajor) {
                tma_store_3d(&map_d, buf, m0 + int(half * 64u), col0, ld);
            } else {
                if (kNarrowBox) {                // the chunk's own narrow boxes (gemm_config.cuh)
#pragma unroll
                    for (u32 x = 0; x < cols / kBoxCols; ++x)
                        tma_store_3d(&map_d, buf + x * kBoxBytes, col0 + int(x * kBoxCols),
                                     m0 + int(half * 64u), ld);
                } else {
                    tma_store_3d(&map_d, buf, col0, m0 + int(half * 64u), ld);
                }
            }
            tma_store_commit();
        }
        ++e;                                     // chunks stored (C buffers, staging buffers)
    }
}
RC_STAMP(4, RC_NOW);
RC_TL_NEXT();
