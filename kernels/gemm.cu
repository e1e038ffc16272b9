// rawcoop GEMM: persistent, TMA warp-specialized, cooperative (sm_90a).
//
//   D[l] = act(alpha · A[l]·B[l] + beta · C[l] + bias)      for l in [0, L)
//
//   A: M×K, B: K×N, fp32 accumulation, D in fp16/bf16/fp32.  Inputs (IN_KIND
//   for A, IN_KIND_B for B): fp16, bf16, tf32 (fp32 in memory; the tensor
//   core reads its top 19 bits) or fp8 e4m3/e5m2 (A and B may differ).  The
//   kernel is one for all of them, generalised by the element size: a K-major
//   shared-memory row is always 128 bytes (one 128B swizzle atom), so
//   BLOCK_K = 128 / element bytes (64, 32 or 128) and a k-block is always 4
//   wgmma k-steps of 32 bytes (k16, k8, k32); stage sizes do not depend on
//   the type.  16-bit operands are K-major or MN-major (A_KMAJOR, B_KMAJOR):
//   the four layouts TN/NN/NT/TT come from the TMA box orientation and
//   wgmma's transpose bits, never from copies.  wgmma has no transpose for
//   tf32/fp8: those operands must be K-major (static_assert).  fp8 kernels
//   take two more arguments, scale_a and scale_b (1-element fp32 device
//   arrays, null = 1): the epilogue uses alpha·scale_a·scale_b (per-tensor
//   dequantisation, as torch._scaled_mm).  Block-scaled fp8 (SCALE_MODE 1,
//   the DeepSeek-V3 recipe; see "Block scales" below) replaces the two
//   pointers with per-(row, k-block) A scales and per-(128-column block,
//   k-block) B scales applied inside the mainloop.  "Rows"/"columns" below are
//   the kernel's own M and N; the host may hand it the transposed problem
//   (swap-AB for small M), then D and C are column-major in the kernel's view
//   (D_COLMAJOR, C_COLMAJOR) and the bias runs along rows (BIAS_ON_ROWS).
//
// Threads: 384 = 3 warpgroups, __launch_bounds__(384, 1) (BLOCK_M 192: 512 = 4
// warpgroups, a third consumer; see "Tall tiles" below).
//   WG0  producer, setmaxnreg 40
//        warp 0, lane 0 (mainloop load): for every k-block of every tile of
//                  this CTA's sequence: wait empty[s], arrive.expect_tx on
//                  full[s] with the stage's bytes, TMA-load the A tile
//                  (128×BLOCK_K) and the B tile (BLOCK_N×BLOCK_K), as one box
//                  for a K-major operand or 64-wide boxes for an MN-major one
//                  (in a cluster: half of the shared operand, multicast; see
//                  Clusters below).  The stage's bytes are the same either
//                  way: the peer's multicast half lands on our full[s] too.
//        warps 1, 2 (3 too for BLOCK_M 192), lane 0 (epilogue loads, only when HAS_C): after the
//                  first mainloop load was issued (mbarrier first_load), warp
//                  1 + c walks consumer c's units and TMA-loads each 64-row
//                  epilogue chunk of C into consumer c's double buffer
//                  (c_full/c_empty), in the order c's epilogue reads them.
//        warp 3: idle (128-row tiles; with BLOCK_M 192 it is consumer 2's C loader).
//   WG1, WG2  consumers, setmaxnreg 232 (BLOCK_M 192: WG1-WG3, setmaxnreg 152).
//        Cooperative (PINGPONG 0): both consumers work on every unit; consumer
//        c owns rows [64c, 64c+64) of the shared 128×BLOCK_N tile.
//        Ping-pong (PINGPONG 1, BLOCK_N <= 128): consumer c takes every other
//        unit of the CTA's sequence (positions j with j % 2 == c) and owns
//        both 64-row halves of it; it skips the other consumer's stages of the
//        ring.  The ring hands out stages in unit order, so one consumer's
//        mainloop runs while the other runs its epilogue: the epilogue hides
//        behind tensor-core work.  With STREAM_K (opt-in) the stream-K pieces
//        alternate too; a CTA's empty stream-K units come last in its
//        sequence, so no consumer waits for a hand-over (turn) from one.
//        Per k-block: wait full[s], issue 4 (cooperative) or 8 (ping-pong)
//        wgmma m64nBLOCK_N (k16/k8/k32; smem descriptors, 128B swizzle), commit, wait
//        until only this batch is in flight and release the previous stage
//        (one arrive per warp on empty[s']).  Epilogue per 64-row chunk of
//        EPI_COLS columns: (C from smem) → alpha·acc + beta·c + bias → act →
//        convert → 128B-swizzled staging buffer (bank-conflict free) →
//        fence.proxy.async → named barrier → one thread TMA-stores the chunk.
//        Two staging buffers per consumer alternate, each rewritten only after
//        cp.async.bulk.wait_group.read says its last store has read it.
//
// Barriers (mbarrier):
//   full[s]      count 1      producer's arrive.expect_tx; TMA complete_tx
//   empty[s]     count 8 (cooperative) or 4 (ping-pong), × CTAs per cluster
//                             (CLUSTER_M · CLUSTER_N): one arrive per consumer
//                             warp of the cluster that read the stage (remote
//                             arrives through mapa: the peer's producer
//                             multicasts into this stage too)
//   c_full[c][b] count 1      C loader's arrive.expect_tx (HAS_C)
//   c_empty[c][b] count 4     one arrive per warp of consumer c after reading C
//   first_load   count 1      producer, after its first TMA load
//   turn[c]      count 1      ping-pong: the other consumer saw the last stage
//                             of its unit full; consumer c may start the next
//   Ring position (stage, phase) advances identically on both sides over the
//   whole tile sequence; waits use parity `phase` (consumer side) and
//   `phase ^ 1` (producer side: the first pass falls through).
//   Named barriers 1, 2: the 128 threads of consumer 0 / 1.
//
// Block scales (SCALE_MODE 1, fp8 only; BLOCK_K = 128 = the scale block):
//   D = act(alpha · Σ_kb SA[m, kb] · SB[n / 128, kb] · (A_kb · B_kb) + ...)
//   SA (M × ceil(K/128) fp32, one scale per row and k-block) arrives by TMA
//   with each stage: one extra 128-float box (rows m0..m0+127 of k-block kb;
//   SA is M-major in memory, so the box is 512 contiguous bytes) on the same
//   full[s] barrier (expect_tx + 512), in a per-stage slot after the C
//   buffers.  SB (ceil(N/128) × ceil(K/128) fp32, any strides) is read with
//   ld.global.cg, one float per k-block (BLOCK_N <= 128: a tile lies inside
//   one 128-column block), BS_SB_AHEAD k-blocks before it is used so that its
//   latency hides behind the MMAs.  Per k-block each consumer runs its wgmmas into a
//   temporary accumulator (scale-d 0 at the first k-step), reads its two
//   rows' SA (row0, row0 + 8 of each warp's 16-row slice, as in the
//   epilogue), waits for them, releases the stage (after fence.proxy.async:
//   the SA slot was read through the generic proxy and TMA rewrites it) and
//   promotes in fp32 registers: acc += tmp · (SA[row] · SB).  The fp8 tensor
//   core's limited accumulator precision thus only ever sums 128 products.
//   Cooperative tiles use two temporaries (BS_TWO_TMP): k-block kb + 1's
//   wgmmas are issued into the other one before kb is waited for
//   (wait_group 1) and promoted, so the tensor pipe keeps working through the
//   promotion (+6-11% at 4096×7168×16384 and 4096×4096×7168 on the H200,
//   bench/NOTES.md stop 13; results bit-identical to one temporary: the same
//   operations in the same order).  Ping-pong keeps one temporary and waits
//   with wait_group 0.  Registers: acc + tmp = 2 · kHalves · BLOCK_N / 2 <= 128
//   per thread (+ 64 for the second temporary of 128×128), so 128×128
//   cooperative or 128×64 (cooperative or ping-pong); 128×256 and 128×128
//   ping-pong would need 256 (static_assert).  Out-of-bounds SA rows (M not a multiple of
//   128) are TMA zero-fills, multiplied by the zero-filled rows of A (never
//   NaN·0 unless the user's scales are NaN/inf); ghost columns (a 1×2
//   cluster's tile at or right of N) read SB as 0, their B rows are zeros.
//   Split-K: each split promotes its own k-blocks (global index kb_begin +
//   kb for SA and SB).  Clusters: SA is loaded by each CTA for itself (never
//   multicast), only A/B tiles are shared as usual.
//
// Persistence: grid = min(#SMs, #units); CTA b walks work units b, b+G, ...
// (scheduler.cuh): a unit is a whole tile (data-parallel) or one K-split of a
// tile of the partial last wave, or (STREAM_K 1, opt-in) one piece of CTA b's
// equal share of the partial last wave's k-blocks (see scheduler.cuh); tiles
// run over L·tiles_m·tiles_n in grouped raster order.  The producer runs ahead into the next unit while the
// consumers run the fix-up/epilogue.  Split-K fix-up (details at the code):
// per (tile, consumer) a flag and fp32 workspace; cooperative kernels whose
// tiles have all their splits running at once (the host says so) spread it: every
// split stores its partial of the other splits' epilogue chunks, waits for all,
// sums and stores its own share of the chunks; otherwise a serial chain (split
// s waits for flag == s, adds, stores or, last, runs the epilogue).  Either
// way a fixed reduction order: results are bit-identical run to run.  Ragged M/N/K: TMA loads zero-fill (and still
// count the whole box), stores clip.  Operands broadcast over the batch have
// batch coordinate 0 (bmask bits 0-2: A, B, C batched; bit 3: spread split-K).  griddepcontrol.wait follows the prologue, so
// with programmatic dependent launch the prologue overlaps the previous grid.
//
// Clusters (at most one of CLUSTER_M, CLUSTER_N is 2; launched as clusters of
// (2, 1, 1) either way, only the tile mapping differs): two CTAs on adjacent
// tiles share one operand tile and each loads half of it, multicast (mask
// 0b11) into the same stage of both CTAs.
//   2×1 (CLUSTER_M 2): vertically adjacent tiles (tile rows 2i, 2i+1) share
//        the B tile: rank r loads B rows [r·BLOCK_N/2, (r+1)·BLOCK_N/2) when
//        K-major, its half of the 64-wide atoms when N-major; own A tile.
//   1×2 (CLUSTER_N 2): horizontally adjacent tiles (tile columns 2j, 2j+1)
//        share the A tile: rank r loads A rows [64r, 64r+64) when K-major,
//        the 64-wide atom r when M-major; own B tile.
// The scheduler's tiles are then pairs: tiles_m (2×1) or tiles_n (1×2) counts
// pairs, both CTAs walk the same unit sequence (first unit blockIdx.x / 2,
// step gridDim.x / 2) and the rank picks the tile inside the pair, so the ring
// positions and (ping-pong) consumer of every unit agree in both CTAs.  A
// ghost tile (odd tile rows/columns) runs the whole protocol: its own loads
// are out of bounds and zero-filled, its half of the shared tile is real, its
// stores clip: a ghost row's halves start at or below row M (C loads
// zero-filled, no store), a ghost column's chunks at or right of column N (no
// chunk at all: no C load, no store).  Split-K slots and flags are per (tile,
// rank, consumer).  cluster_sync after barrier init (peers arrive on and
// multicast into our barriers) and before exit (no CTA leaves while its peer
// can still arrive on it).
//
// Tall tiles (BLOCK_M 192, cooperative, BLOCK_N 128 or 192): three consumer
// warpgroups own the 64-row thirds of a 192-row tile; 512 threads, the
// consumers at setmaxnreg 152 (40·128 + 152·384 <= 64K registers; a 192-wide
// tile's accumulators are 96 per thread).  One staging (and C) buffer per
// consumer instead of two, so that four 48 KB stages of 192x192 fit.  Split-K
// slots and flags are per (tile, consumer), three per tile.  No clusters,
// ping-pong, stream-K or block scales (static_assert).  The point: tile
// counts that 128-row tiles quantise badly (1536 = 8·192 rows; cuBLAS runs
// 192x192 tiles on such shapes).
#include "ptx.cuh"
#include "wgmma.cuh"
#include "scheduler.cuh"

// ------------------------------------------------------------------ config
#ifndef BLOCK_N
#define BLOCK_N 256
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef IN_KIND             // input kind of A: 0 fp16, 1 bf16, 2 tf32 (fp32 storage), 3 fp8 e4m3, 4 fp8 e5m2
#define IN_KIND 1
#endif
#ifndef IN_KIND_B           // input kind of B: IN_KIND, except that fp8 A and B may differ (e4m3 x e5m2)
#define IN_KIND_B IN_KIND
#endif
#ifndef A_KMAJOR
#define A_KMAJOR 1
#endif
#ifndef B_KMAJOR
#define B_KMAJOR 1
#endif
#ifndef OUT_TYPE            // 0 fp16, 1 bf16, 2 fp32
#define OUT_TYPE (IN_KIND == 0 ? 0 : IN_KIND == 2 ? 2 : 1)
#endif
#ifndef HAS_C
#define HAS_C 0
#endif
#ifndef C_COLMAJOR
#define C_COLMAJOR 0
#endif
#ifndef D_COLMAJOR
#define D_COLMAJOR 0
#endif
#ifndef BIAS                // 0 none, 1 fp32, 2 bf16, 3 fp16
#define BIAS 0
#endif
#ifndef BIAS_ON_ROWS
#define BIAS_ON_ROWS 0
#endif
#ifndef ACT                 // 0 none, 1 relu, 2 gelu (tanh form), 3 silu
#define ACT 0
#endif
#ifndef CLUSTER_M           // 1, or 2: two CTAs on vertically adjacent tiles share (multicast) B
#define CLUSTER_M 1
#endif
#ifndef CLUSTER_N           // 1, or 2: two CTAs on horizontally adjacent tiles share (multicast) A
#define CLUSTER_N 1
#endif
#define RC_CLUSTER (CLUSTER_M * CLUSTER_N)   // CTAs per cluster (launched as a cluster of (RC_CLUSTER, 1, 1))
#ifndef PINGPONG            // 0 cooperative: both consumers share a tile; 1: consumers alternate tiles
#define PINGPONG 0
#endif
#ifndef SCALE_MODE          // fp8 scales: 0 per-tensor (scale_a, scale_b pointers), 1 block-scaled (1x128 A, 128x128 B)
#define SCALE_MODE 0
#endif
#define RC_BLOCK_SCALED (SCALE_MODE == 1)
#ifndef BS_TWO_TMP          // block-scaled: two promotion temporaries (kb+1's wgmmas run while kb is promoted); 0: one
#define BS_TWO_TMP 1
#endif
#define RC_BS_TWO_TMP (BS_TWO_TMP && !PINGPONG)   // ping-pong block-scaled keeps one temporary (registers)
#ifndef UNIFORM_CONSUMER    // the consumer index through redux.sync (see below): ping-pong kernels without clusters
#define UNIFORM_CONSUMER (PINGPONG && RC_CLUSTER == 1)   // (H200 stop 15: 4096x14336x4096 +1.7%; cooperative
#endif                      // rows +-1%, block-scaled 4096^2x7168 -1.7%; ping-pong 2x1 clusters spilled)
#ifndef SPLIT_SPREAD        // split-K: every split reduces and stores a share of the tile's chunks (1) or a serial chain (0)
#define SPLIT_SPREAD 1
#endif
#define RC_SPREAD (SPLIT_SPREAD && !PINGPONG && !STREAM_K)   // cooperative data-parallel/split-K kernels only
// Diagnostics (RC_TIMELINE defined: never in a shipped kernel): thread 0 of each consumer stamps
// %globaltimer (ns) at its units' start, mainloop end, fix-up end and epilogue end into the
// module global rc_timeline, RC_TL_UNITS units per (CTA, consumer), records of 5 u64: unit index,
// then the four stamps.  bench/timeline.py reads it back.
#ifdef RC_TIMELINE
#define RC_TL_UNITS 16
__device__ unsigned long long rc_timeline[1024 * 4 * RC_TL_UNITS * 5];
#endif
#ifndef BS_SB_AHEAD         // block-scaled: SB is read from L2 this many k-blocks before it is used
#define BS_SB_AHEAD (RC_BS_TWO_TMP ? 1 : 2)   // H200, stop 13: 1 is 3-4% faster with two temporaries
#endif

// Element size, and which wgmma: a k-step always reads 32 bytes of K per row
// (k16 of a 16-bit type, k8 of tf32, k32 of fp8).
#if IN_KIND == 0 || IN_KIND == 1
#define RC_IN_BYTES 2
#elif IN_KIND == 2
#define RC_IN_BYTES 4
#else
#define RC_IN_BYTES 1
#endif
#define RC_FP8 (IN_KIND >= 3)

#ifndef BLOCK_M             // 128, or 192: three consumer warpgroups of 64 rows each (see "Tall tiles")
#define BLOCK_M 128
#endif
#ifndef EPI_RING            // 1: the staging buffers alias the ring's first A stages (see "Staging in the ring")
#define EPI_RING 0
#endif
#define BLOCK_K (128 / RC_IN_BYTES)     // one 128-byte swizzle row of K per k-block: 64 / 32 / 128 elements
#define RC_KSTEPS (BLOCK_K * RC_IN_BYTES / 32)   // wgmma k-steps of 32 bytes per k-block: always 4

#if IN_KIND == 0
#define RC_ELEM f16
#elif IN_KIND == 1
#define RC_ELEM bf16
#elif IN_KIND == 2
#define RC_ELEM tf32
#elif IN_KIND == 3 && IN_KIND_B == 3
#define RC_ELEM e4m3_e4m3
#elif IN_KIND == 3 && IN_KIND_B == 4
#define RC_ELEM e4m3_e5m2
#elif IN_KIND == 4 && IN_KIND_B == 3
#define RC_ELEM e5m2_e4m3
#else
#define RC_ELEM e5m2_e5m2
#endif
#define RC_WGMMA_NAME(n_, k_, t_) wgmma_m64n##n_##k##k_##_##t_
#define RC_WGMMA_XNAME(n_, k_, t_) RC_WGMMA_NAME(n_, k_, t_)
// One k-step of the mainloop: the generated wrapper of kernels/wgmma.cuh.  Only
// the 16-bit wrappers take the transpose bits (K-major 0, MN-major 1).
#if RC_IN_BYTES == 2
#define RC_WGMMA(n) RC_WGMMA_XNAME(n, 16, RC_ELEM)<1 - A_KMAJOR, 1 - B_KMAJOR>
#elif RC_IN_BYTES == 4
#define RC_WGMMA(n) RC_WGMMA_XNAME(n, 8, RC_ELEM)
#else
#define RC_WGMMA(n) RC_WGMMA_XNAME(n, 32, RC_ELEM)
#endif

constexpr u32 kInBytes = RC_IN_BYTES;
constexpr u32 kOutBytes = OUT_TYPE == 2 ? 4 : 2;
constexpr u32 kABytes = BLOCK_M * BLOCK_K * kInBytes;       // 16 KB
constexpr u32 kBBytes = BLOCK_N * BLOCK_K * kInBytes;
constexpr u32 kStageBytes = kABytes + kBBytes;
constexpr u32 kAtomBytes = 64 * BLOCK_K * kInBytes;          // one 64-wide MN-major box (16-bit only): 8 KB
// Epilogue chunk: 64 rows × kEpiCols columns = 8 KB, 128-byte lines.
//   row-major:    a line is a row of kEpiCols elements
//   column-major: a line is a column of 64 16-bit elements; fp32: a column's
//                 64 values take two lines, so the chunk is two boxes of 32
//                 rows × 32 columns (4 KB each, rows 32-63 at +4 KB), two TMA
//                 loads (C) or stores (D) per chunk (colmajor_f32 below)
constexpr u32 kEpiCols = 128 / kOutBytes;
constexpr u32 kEpiBytes = 64 * 128;
constexpr u32 kConsumers = BLOCK_M / 64;                     // cooperative: one 64-row half (third) each
constexpr u32 kThreads = 128 * (1 + kConsumers);             // a producer warpgroup and the consumers
// Registers per consumer thread after setmaxnreg (the producer keeps 40): 40·128 + 232·256 and
// 40·128 + 152·384 both fit the SM's 64K.
constexpr u32 kConsumerRegs = kConsumers == 2 ? 232 : 152;
// Staging (and C) buffers per consumer: two alternate; a tall tile keeps one, so
// that four stages of its 48 KB (192x192) fit beside three consumers' buffers.
constexpr u32 kEpiBuffers = BLOCK_M == 128 ? 2 : 1;
// Cooperative: consumer c owns the 64-row half c of every tile.  Ping-pong:
// consumer c owns every other unit of the CTA's sequence, both halves of it.
constexpr u32 kHalves = PINGPONG ? 2 : 1;                    // 64-row halves per consumer and unit
constexpr u32 kAccRegs = BLOCK_N / 2;                        // per half
constexpr u32 kStageReaders = (PINGPONG ? 1 : kConsumers) * 4 * RC_CLUSTER;  // warps that release a stage
constexpr u32 kChunkRegs = kEpiCols / 2;                     // accumulators per chunk per thread
// Tile widths between the multiples of the chunk (BLOCK_N % kEpiCols != 0: 144 ... 240 for 16-bit
// output, see "Narrow boxes" below): the last chunk of a 64-row half has only kTailCols columns.
constexpr u32 kTailCols = BLOCK_N % kEpiCols;
constexpr u32 kChunks = (BLOCK_N + kEpiCols - 1) / kEpiCols;  // epilogue chunks per 64-row half
// Narrow boxes.  A TMA store writes whole boxes (clipped only at the tensor's edge), so a 64-column
// box would overwrite the next tile's first columns from a partial chunk.  Kernels whose tile width
// is not a multiple of the chunk therefore store (and load C) in boxes of 32-byte lines: 64 lines x
// kBoxCols columns (16 16-bit or 8 fp32 values), 32B-swizzled, kEpiCols / kBoxCols boxes of 2 KB per
// chunk (a partial chunk stores only its own), all of one chunk in one bulk group.  Row-major D and
// C only (column-major ones keep whole-chunk boxes: their lines are columns, and a column-major
// C box loaded past the tile is only read as far as the tile goes).
constexpr bool kNarrowBox = kTailCols != 0;
constexpr u32 kBoxCols = kNarrowBox ? 32 / kOutBytes : kEpiCols;
constexpr u32 kBoxBytes = 64 * 32;                             // a narrow box: 64 lines of 32 B
// Columns of chunk jc (compile-time wherever jc is an unrolled index).
RC_DEVICE constexpr u32 chunk_cols(u32 jc) { return (kTailCols && jc == kChunks - 1) ? kTailCols : kEpiCols; }
#if RC_BLOCK_SCALED
constexpr u32 kSABytes = BLOCK_M * 4;                        // per stage: one fp32 A scale per tile row
#endif

// Shared-memory map (offsets from a 1024-byte aligned base).
//
// Staging in the ring (EPI_RING 1): the staging buffers take the first A
// stages instead of their own 32 KB, which buys the ring one more stage (the
// paired one-row arrangement, 128x64 tiles: 9 stages of 24 KB instead of 8).
// Valid only when every CTA runs at most one unit (the host checks
// units <= clusters resident; a CTA given a second unit traps) of a whole
// tile (no split-K, stream-K or ping-pong): by the time consumer c stores its
// first chunk every stage of the CTA's only unit is full - no TMA load, the
// peer's multicast included, can still land in the ring - and a barrier of
// all consumers after their last wgmma_wait<0> says no wgmma reads it.
constexpr u32 kEpiAll = kConsumers * kEpiBuffers * kEpiBytes;   // every consumer's staging buffers
constexpr u32 kOffA = 0;
constexpr u32 kOffB = kOffA + STAGES * kABytes;
constexpr u32 kOffRingEnd = kOffB + STAGES * kBBytes;
constexpr u32 kOffEpi = EPI_RING ? kOffA : kOffRingEnd;
constexpr u32 kOffC = EPI_RING ? kOffRingEnd : kOffEpi + kEpiAll;
static_assert(!EPI_RING || (kEpiAll <= STAGES * kABytes && !PINGPONG && !STREAM_K && BLOCK_M == 128),
              "EPI_RING: cooperative 128-row data-parallel tiles whose A stages hold the staging buffers");
#if RC_BLOCK_SCALED
constexpr u32 kOffSA = kOffC + (HAS_C ? kEpiAll : 0);
constexpr u32 kOffBar = kOffSA + STAGES * kSABytes;
#else
constexpr u32 kOffBar = kOffC + (HAS_C ? kEpiAll : 0);
#endif
constexpr u32 kBarCount = 2 * STAGES + 2 * kConsumers * kEpiBuffers + 1 + kConsumers;
constexpr u32 kSmemBytes = kOffBar + kBarCount * 8 + 1024;   // + alignment slack
static_assert(kSmemBytes <= 232448, "shared memory over the sm_90 per-block limit");
static_assert(BLOCK_K * kInBytes == 128, "one 128-byte swizzle atom per K-major tile row");
static_assert(RC_KSTEPS == 4, "four 32-byte wgmma k-steps per 128-byte row");
static_assert(IN_KIND >= 0 && IN_KIND <= 4 && IN_KIND_B >= 0 && IN_KIND_B <= 4, "IN_KIND: 0..4");
static_assert(IN_KIND == IN_KIND_B || (IN_KIND >= 3 && IN_KIND_B >= 3),
              "A and B kinds may differ only for fp8 (e4m3 x e5m2)");
static_assert(kInBytes == 2 || (A_KMAJOR && B_KMAJOR),
              "wgmma cannot transpose 32-bit/8-bit operands: tf32 and fp8 A and B must be K-major");
static_assert(BLOCK_N % 64 == 0 || (BLOCK_N % 16 == 0 && BLOCK_N > 128 && BLOCK_N < 256 && kInBytes == 2 && B_KMAJOR
                                     && !D_COLMAJOR && BLOCK_M == 128 && !RC_BLOCK_SCALED),
              "tile shape: a multiple of 64 columns, or (narrow boxes) 144..240 in steps of 16 for 16-bit inputs "
              "with K-major B (no 64-wide B atoms), row-major D, 128-row tiles, no block scales");
static_assert(kTailCols % kBoxCols == 0 && kEpiCols % kBoxCols == 0, "narrow boxes tile a chunk");
static_assert(!PINGPONG || BLOCK_N <= 128, "ping-pong holds two 64-row halves: 128 columns at most");
static_assert((CLUSTER_M == 1 || CLUSTER_M == 2) && (CLUSTER_N == 1 || CLUSTER_N == 2) && RC_CLUSTER <= 2,
              "clusters: 1x1, 2x1 (CLUSTER_M = 2) or 1x2 (CLUSTER_N = 2)");
static_assert(CLUSTER_M == 1 || BLOCK_N >= 128, "a 2x1 cluster splits B into halves of whole 64-wide atoms");
static_assert(CLUSTER_M == 1 || B_KMAJOR || BLOCK_N % 128 == 0,
              "a 2x1 cluster with N-major B: each CTA loads BLOCK_N / 128 whole 64-wide atoms (192 has 3)");
static_assert(CLUSTER_N == 1 || A_KMAJOR || BLOCK_M % 128 == 0,
              "a 1x2 cluster with M-major A: each CTA loads BLOCK_M / 128 whole 64-wide atoms");
static_assert(SCALE_MODE == 0 || SCALE_MODE == 1, "SCALE_MODE: 0 per-tensor, 1 block-scaled");
static_assert(!RC_BLOCK_SCALED || RC_FP8, "block scales (SCALE_MODE 1) are for fp8 inputs");
static_assert(!RC_BLOCK_SCALED || BLOCK_N <= 128,
              "block-scaled: a tile must lie inside one 128-column B scale block (BLOCK_N 64 or 128)");
static_assert(!RC_BLOCK_SCALED || kHalves * kAccRegs <= 64,
              "block-scaled: accumulators + promotion temporaries must fit in 128 registers per thread "
              "(128x128 cooperative or 128x64; not 128x256, not 128x128 ping-pong)");
static_assert(BS_SB_AHEAD >= 0 && BS_SB_AHEAD <= 4, "BS_SB_AHEAD: 0..4 k-blocks");
static_assert(BLOCK_M == 128 || (BLOCK_M == 192 && !PINGPONG && !RC_BLOCK_SCALED && RC_CLUSTER == 1 && !STREAM_K
                                  && BLOCK_N <= 192),
              "tall tiles (BLOCK_M 192): cooperative, 128 or 192 columns, no clusters, stream-K or block scales");
static_assert(!STREAM_K || (RC_CLUSTER == 1 && !(PINGPONG && RC_BLOCK_SCALED)),
              "stream-K kernels are without clusters (gridDim.x CTAs share the ranges); ping-pong stream-K "
              "is not built block-scaled");

// ------------------------------------------------------------------ epilogue math
RC_DEVICE float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
RC_DEVICE float rcp_approx(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
// 1 / (1 + exp(-x)) with two MUFU ops; exact limits 0 and 1 at the extremes.
RC_DEVICE float sigmoid_fast(float x) { return rcp_approx(1.f + ex2_approx(-1.4426950408889634f * x)); }

RC_DEVICE float activate(float v) {
#if ACT == 1
    return v > 0.f ? v : (v == v ? 0.f : v);                  // relu, NaN propagates
#elif ACT == 2
    // gelu, tanh form: 0.5 v (1 + tanh(y)) = v · sigmoid(2y), y = sqrt(2/pi) (v + 0.044715 v^3)
    const float y2 = v * (1.5957691216057308f + 0.0713548162726f * v * v);   // 2y
    return v * sigmoid_fast(y2);
#elif ACT == 3
    return v * sigmoid_fast(v);                               // silu
#else
    return v;
#endif
}

RC_DEVICE float bf16_to_f32(u16 h) { return u32_as_f32(((u32)h) << 16); }
RC_DEVICE float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

RC_DEVICE float load_bias(const void* bias, int i) {
#if BIAS == 1
    return static_cast<const float*>(bias)[i];
#elif BIAS == 2
    return bf16_to_f32(static_cast<const u16*>(bias)[i]);
#elif BIAS == 3
    return f16_to_f32(static_cast<const u16*>(bias)[i]);
#else
    return 0.f;
#endif
}

// 16-bit element <-> fp32 for the epilogue (output type)
RC_DEVICE float out16_to_f32(u16 h) {
#if OUT_TYPE == 1
    return bf16_to_f32(h);
#else
    return f16_to_f32(h);
#endif
}
RC_DEVICE u32 pack_out16(float lo, float hi) {
#if OUT_TYPE == 1
    return pack_bf16x2(lo, hi);
#else
    return pack_f16x2(lo, hi);
#endif
}

// A consumer warp is done reading a stage: arrive on its empty barrier in every
// CTA of the cluster (with multicast, each CTA's producer writes into both).
// The epilogue chunks (of kChunks per 64-row half) a unit stores: all of its
// tile's, except with the spread split-K reduction, where split s of S stores
// [s·kChunks/S, (s+1)·kChunks/S) (possibly none).  The consumers and the C
// loader both take it from here.  `spread`: the launch spreads its reductions
// (RC_SPREAD and the host's bmask bit 3, see the kernel).
struct ChunkRange {
    bool spread;    // this unit is a split of a spread reduction
    u32 lo, hi;
};
RC_DEVICE ChunkRange epilogue_chunks(const WorkUnit& w, bool spread) {
    const bool sp = RC_SPREAD && spread && w.splits > 1;
    return ChunkRange{sp, sp ? u32(w.split) * kChunks / u32(w.splits) : 0u,
                      sp ? u32(w.split + 1) * kChunks / u32(w.splits) : kChunks};
}
// Chain split-K: one slot (64 x BLOCK_N fp32 per 64-row half) per (tile, rank, consumer).
RC_DEVICE float* ws_chain(float* workspace, int slot) { return workspace + (size_t)slot * (64 * BLOCK_N); }
// Spread split-K: once consumer warpgroup c's 128 threads have stored (named
// barrier 1 + c), thread 0 counts the tile's flag up (release) and waits until
// all `splits` splits have counted (acquire); then the warpgroup goes on
// together.  Past its wait each split counts once more, and the one whose count
// is the flag's 2·splits-th zeroes it for the next launch: every split is past
// its last wait then.
RC_DEVICE void spread_count_and_wait(int* flag, int splits, u32 c, u32 tid, u32 slot, u32 split) {
    named_barrier_sync(1 + c, 128);          // every thread's stores are written ...
    if (tid == 0) {
        red_add_release_gpu(flag, 1);        // ... before the count moves
#ifdef RAWCOOP_WATCHDOG
        const u64 start = clock_cycles();
#endif
        while (ld_acquire_gpu(flag) < splits) {
            nanosleep_ns(64);
            RC_WATCH(start, "split-K flag (spread)", slot, split);
        }
        if (atom_add_relaxed_gpu(flag, 1) == 2 * splits - 1) st_release_gpu(flag, 0);
    }
    named_barrier_sync(1 + c, 128);
}

RC_DEVICE void release_stage(u32 bar) {
#if RC_CLUSTER > 1
#pragma unroll
    for (u32 r = 0; r < RC_CLUSTER; ++r) mbar_arrive_remote(bar, r);
#else
    mbar_arrive(bar);
#endif
}

// TMA-load one operand's ROWS x BLOCK_K tile of a stage: one box when K-major
// (rows of 128 B), 64-row boxes when MN-major (16-bit only: lines of 64 MN
// elements per K).
template <int KMAJOR, u32 ROWS>
RC_DEVICE void load_operand(u32 dst, const TmaMap* map, u32 bar, int k0, int row0, int l) {
    if (KMAJOR) {
        tma_load_3d(dst, map, bar, k0, row0, l);
    } else {
#pragma unroll
        for (u32 h = 0; h < ROWS / 64; ++h) tma_load_3d(dst + h * kAtomBytes, map, bar, row0 + int(64 * h), k0, l);
    }
}

// Cluster of 2: the two CTAs work on adjacent tiles that share one operand
// tile: B for 2x1 (vertically adjacent tiles), A for 1x2 (horizontally
// adjacent ones).  CTA `rank` loads half of the shared tile (half the rows when
// K-major, half the 64-wide atoms when MN-major) and multicasts it to both.
template <int KMAJOR, u32 ROWS>
RC_DEVICE void load_operand_multicast(u32 dst, const TmaMap* map, u32 bar, int k0, int row0, int l, u32 rank) {
    if (KMAJOR) {
        tma_load_3d_multicast(dst + rank * (ROWS / 2) * 128u, map, bar, k0, row0 + int(rank * (ROWS / 2)), l, 3);
    } else {
#pragma unroll
        for (u32 i = 0; i < ROWS / 128; ++i) {
            const u32 h = rank * (ROWS / 128) + i;
            tma_load_3d_multicast(dst + h * kAtomBytes, map, bar, row0 + int(64 * h), k0, l, 3);
        }
    }
}

// Address of byte `x` of 128-byte line `line` in a 128B-swizzled buffer.
RC_DEVICE u32 swz(u32 buf, u32 line, u32 x) {
    return buf + line * 128u + ((((x >> 4) ^ (line & 7u)) << 4) | (x & 15u));
}

// Byte x of row `row` of a row-major epilogue chunk (D staging, row-major C): one 128B-swizzled box of
// 64 lines of 128 B, or with narrow boxes (see above) box x / 32 of 64 lines of 32 B, 32B-swizzled
// (the 16-byte half of a line flips with bit 2 of the line: address bit 4 ^= bit 7).
RC_DEVICE u32 chunk_addr(u32 buf, u32 row, u32 x) {
    if (kNarrowBox) {
        const u32 xb = x % 32u;
        return buf + (x / 32u) * kBoxBytes + row * 32u + ((((xb >> 4) ^ ((row >> 2) & 1u)) << 4) | (xb & 15u));
    }
    return swz(buf, row, x);
}

// fp32 element (row, col) of a column-major epilogue chunk (C or D with the
// kernel's M contiguous): box row / 32 (4 KB of 32 lines), line col, byte
// 4 · (row % 32) of it.
RC_DEVICE u32 colmajor_f32(u32 buf, u32 row, u32 col) {
    return swz(buf + (row / 32u) * 4096u, col, (row % 32u) * 4u);
}

// Trimmed boxes.  A K-major operand with fewer rows than its tile (M < 128
// for A, N < BLOCK_N for B: then there is a single tile row/column) is
// loaded with a box of only round8(rows) lines (the host encodes its map so,
// gemm_configs.py `trimmed_lines`); the rest of the tile's shared-memory lines keep
// whatever an earlier stage left there.  Those lines only feed rows (columns)
// of D at or past M (N), which are never stored, so their values do not
// matter; the point is that a box that is mostly out of bounds costs TMA
// time (zero fill) on problems that are bound by memory (small M, swap-AB).
// Not with clusters (multicast halves) nor MN-major operands (64-wide boxes).
template <int KMAJOR>
RC_DEVICE u32 trimmed_lines(int rows, int tile) {
    return (KMAJOR && RC_CLUSTER == 1 && rows < tile) ? u32((rows + 7) & ~7) : u32(tile);
}

// ------------------------------------------------------------------ kernel
extern "C" __global__ void __launch_bounds__(kThreads, 1)
gemm_kernel(const __grid_constant__ TmaMap map_a, const __grid_constant__ TmaMap map_b,
            const __grid_constant__ TmaMap map_c, const __grid_constant__ TmaMap map_d,
            int M, int N, int K, int L, int tiles_m, int tiles_n, int group, int bmask,
            float alpha, float beta, const void* __restrict__ bias,
            int tiles_dp, int splits, float* __restrict__ workspace, int* __restrict__ flags
#if RC_FP8 && RC_BLOCK_SCALED
            // Block scales: SA through a TMA map (dims (M, ceil(K/128), L), box (128, 1, 1), fp32), SB by
            // pointer with element strides between 128-column blocks, k-blocks and batches.
            , const __grid_constant__ TmaMap map_sa, const float* __restrict__ sb, int sb_n, int sb_k, int sb_l
#elif RC_FP8
            // Per-tensor fp8 scales (1-element fp32 device arrays; null reads as 1), read by the
            // consumers after griddepcontrol.wait: D = alpha * scale_a * scale_b * (A @ B) + ...
            , const float* scale_a, const float* scale_b
#endif
            )
{
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    auto smem_a = [&](u32 s) { return base + kOffA + s * kABytes; };
    auto smem_b = [&](u32 s) { return base + kOffB + s * kBBytes; };
    auto full = [&](u32 s) { return base + kOffBar + 8u * s; };
    auto empty = [&](u32 s) { return base + kOffBar + 8u * (STAGES + s); };
    auto c_full = [&](u32 c, u32 b) { return base + kOffBar + 8u * (2 * STAGES + c * kEpiBuffers + b); };
    auto c_empty = [&](u32 c, u32 b) {
        return base + kOffBar + 8u * (2 * STAGES + kConsumers * kEpiBuffers + c * kEpiBuffers + b);
    };
    const u32 first_load = base + kOffBar + 8u * (kBarCount - 1 - kConsumers);
    auto turn = [&](u32 c) { return base + kOffBar + 8u * (kBarCount - kConsumers + c); };
    auto c_buf = [&](u32 c, u32 b) { return base + kOffC + (c * kEpiBuffers + b) * kEpiBytes; };
#if RC_BLOCK_SCALED
    auto smem_sa = [&](u32 s) { return base + kOffSA + s * kSABytes; };
#endif

    const u32 wg = threadIdx.x / 128;
    const int tiles = L * tiles_m * tiles_n;
    const int k_blocks = (K + BLOCK_K - 1) / BLOCK_K;
    const int units = unit_count(tiles, tiles_dp, splits);
    const bool a_batched = bmask & 1, b_batched = bmask & 2, c_batched = bmask & 4;
    // Units are walked per cluster: tiles_m counts rows of clusters (pairs of
    // tile rows when CLUSTER_M == 2), tiles_n columns of clusters (pairs of tile
    // columns when CLUSTER_N == 2); the rank picks the tile inside the pair.
    // Both CTAs of a cluster walk the same unit sequence.
    const u32 rank = RC_CLUSTER > 1 ? cluster_ctarank() : 0u;
    const u32 rank_m = CLUSTER_M > 1 ? rank : 0u, rank_n = CLUSTER_N > 1 ? rank : 0u;
    const int first_unit = blockIdx.x / RC_CLUSTER, unit_step = gridDim.x / RC_CLUSTER;
    // Spread split-K reduction (see "Split-K fix-up"), bmask bit 3: the host sets
    // it only where every split a unit waits for is guaranteed to be running
    // (rawcoop/scheduler.py `Decomposition.spread`, which also sizes the
    // workspace): the split units fit in one round of the grid (at most one per
    // CTA), or every tile's splits fall in one round on distinct CTAs (the split
    // units start at a round boundary and the splits divide the round; rounds
    // run in order, so all of round r reaches its waits once round r - 1 is
    // done).  Decided on the host: the remainders would cost the kernel integer
    // divisions (and, measured, spills in the tf32 cluster kernels).
    const bool spread = RC_SPREAD && (bmask & 8);

    if (threadIdx.x == 0) {
        tma_prefetch_map(&map_a);
        tma_prefetch_map(&map_b);
        tma_prefetch_map(&map_d);
        if (HAS_C) tma_prefetch_map(&map_c);
#if RC_BLOCK_SCALED
        tma_prefetch_map(&map_sa);
#endif
        for (u32 s = 0; s < STAGES; ++s) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), kStageReaders);   // every consumer warp of the cluster that reads it
        }
        for (u32 c = 0; c < kConsumers; ++c)
            for (u32 b = 0; b < kEpiBuffers; ++b) {
                mbar_init(c_full(c, b), 1);
                mbar_init(c_empty(c, b), 4);
            }
        mbar_init(first_load, 1);
        for (u32 c = 0; c < kConsumers; ++c) mbar_init(turn(c), 1);
        fence_mbar_init();
    }
    if (RC_CLUSTER > 1) cluster_sync(); else __syncthreads();   // peers arrive on / multicast into us
    // Everything above touched no global memory: with programmatic dependent
    // launch it overlaps the previous kernel's tail.
    griddep_wait();

    if (wg == 0) {
        // ============================================================ producer
        setmaxnreg_dec<40>();
        const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        if (warp == 0 && lane == 0) {
            // ---------------------------------------------- mainloop loads
            u32 stage = 0, phase = 0;
            bool first = true;
            // Trimmed boxes (see "Trimmed boxes" above): the bytes one stage really receives.
            const u32 stage_bytes = (trimmed_lines<A_KMAJOR>(M, BLOCK_M) + trimmed_lines<B_KMAJOR>(N, BLOCK_N)) *
                                    (BLOCK_K * kInBytes);
            for (int u = first_unit; u < units; u += unit_step) {
                const WorkUnit w = work_unit(u, tiles_m, tiles_n, group, tiles_dp, splits, k_blocks, tiles);
                const TileCoord tc = w.tc;
                const int m0 = (tc.m * CLUSTER_M + int(rank_m)) * BLOCK_M;
                const int n0 = (tc.n * CLUSTER_N + int(rank_n)) * BLOCK_N;
                const int la = a_batched ? tc.l : 0, lb = b_batched ? tc.l : 0;
                for (int kb = w.kb_begin; kb < w.kb_begin + w.kb_count; ++kb) {
                    const int k0 = kb * BLOCK_K;
                    mbar_wait(empty(stage), phase ^ 1u, "empty (mainloop ring)");
#if RC_BLOCK_SCALED
                    // + this CTA's own A scales of the k-block (never multicast): 128 rows from m0
                    mbar_arrive_expect_tx(full(stage), stage_bytes + kSABytes);
                    tma_load_3d(smem_sa(stage), &map_sa, full(stage), m0, kb, la);
#else
                    mbar_arrive_expect_tx(full(stage), stage_bytes);
#endif
#if CLUSTER_N > 1
                    load_operand_multicast<A_KMAJOR, BLOCK_M>(smem_a(stage), &map_a, full(stage), k0, m0, la, rank);
#else
                    load_operand<A_KMAJOR, BLOCK_M>(smem_a(stage), &map_a, full(stage), k0, m0, la);
#endif
#if CLUSTER_M > 1
                    load_operand_multicast<B_KMAJOR, BLOCK_N>(smem_b(stage), &map_b, full(stage), k0, n0, lb, rank);
#else
                    load_operand<B_KMAJOR, BLOCK_N>(smem_b(stage), &map_b, full(stage), k0, n0, lb);
#endif
                    if (first) { mbar_arrive(first_load); first = false; }
                    if (++stage == STAGES) { stage = 0; phase ^= 1u; }
                }
            }
            griddep_launch_dependents();             // all our loads are issued
        } else if (HAS_C && warp >= 1 && warp <= kConsumers && lane == 0) {
            // ---------------------------------------------- epilogue C loads
            // Warp 1 + c loads consumer c's chunks of C into its double buffer,
            // in exactly the order consumer c's epilogue reads them; it starts
            // after the first mainloop load was issued (first_load).
            const u32 c = warp - 1;
            mbar_wait(first_load, 0, "first_load");
            u32 e = 0;                               // consumer c's chunk counter
            int j = 0;                               // position in this CTA's unit sequence
            for (int u = first_unit; u < units; u += unit_step, ++j) {
                if (PINGPONG && (u32(j) & 1u) != c) continue;
                const WorkUnit w = work_unit(u, tiles_m, tiles_n, group, tiles_dp, splits, k_blocks, tiles);
                if (STREAM_K && w.kb_count == 0) continue;   // stream-K: an empty unit
                // The epilogue's chunks of this unit: all of a tile's for its last
                // unit (chain), this split's share (spread), none otherwise.
                const ChunkRange chunks = epilogue_chunks(w, spread);
                if (!chunks.spread && w.split != w.splits - 1) continue;
                const TileCoord tc = w.tc;
                const int m0 = (tc.m * CLUSTER_M + int(rank_m)) * BLOCK_M;
                const int n0 = (tc.n * CLUSTER_N + int(rank_n)) * BLOCK_N;
                const int lc = c_batched ? tc.l : 0;
#pragma unroll 1
                for (u32 hh = 0; hh < kHalves; ++hh) {
                    const int row = m0 + int(64 * (PINGPONG ? hh : c));
                    for (u32 jj = chunks.lo; jj < chunks.hi; ++jj, ++e) {
                        const int col = n0 + int(jj * kEpiCols);
                        if (col >= N) break;
                        const u32 b = e % kEpiBuffers, ph = (e / kEpiBuffers) & 1u;
                        mbar_wait(c_empty(c, b), ph ^ 1u, "c_empty (epilogue C buffers)");
#if !C_COLMAJOR
                        if (kNarrowBox) {                  // only the chunk's own narrow boxes
                            const u32 boxes = chunk_cols(jj) / kBoxCols;
                            mbar_arrive_expect_tx(c_full(c, b), boxes * kBoxBytes);
                            for (u32 x = 0; x < boxes; ++x)
                                tma_load_3d(c_buf(c, b) + x * kBoxBytes, &map_c, c_full(c, b),
                                            col + int(x * kBoxCols), row, lc);
                            continue;
                        }
#endif
                        mbar_arrive_expect_tx(c_full(c, b), kEpiBytes);
#if C_COLMAJOR && OUT_TYPE == 2
                        // two 32-row boxes (the second's rows may lie past M: zero-filled, still 4 KB)
                        tma_load_3d(c_buf(c, b), &map_c, c_full(c, b), row, col, lc);
                        tma_load_3d(c_buf(c, b) + 4096u, &map_c, c_full(c, b), row + 32, col, lc);
#elif C_COLMAJOR
                        tma_load_3d(c_buf(c, b), &map_c, c_full(c, b), row, col, lc);
#else
                        tma_load_3d(c_buf(c, b), &map_c, c_full(c, b), col, row, lc);
#endif
                    }
                }
            }
        }
    } else {
        // ============================================================ consumers
        setmaxnreg_inc<kConsumerRegs>();
#if UNIFORM_CONSUMER
        const u32 c = warp_uniform(wg - 1);
#else
        const u32 c = wg - 1;
#endif
        const u32 tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
        const u32 epi = base + kOffEpi + c * kEpiBuffers * kEpiBytes;
#if RC_FP8 && !RC_BLOCK_SCALED
        // alpha · scale_a · scale_b, read once per thread (after griddepcontrol.wait, through L2:
        // a previous kernel may just have written them).  The scales live on the device, so new
        // values need neither a recompile nor a new plan, and CUDA graph replays read them anew.
        const float alpha_scaled =
            alpha * (scale_a ? ld_cg_f32(scale_a) : 1.f) * (scale_b ? ld_cg_f32(scale_b) : 1.f);
#define RC_ALPHA alpha_scaled
#else
#define RC_ALPHA alpha
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
#if RC_BS_TWO_TMP
        float tmp2[kHalves][kAccRegs];               // the odd k-blocks' temporary (BS_TWO_TMP)
#pragma unroll
        for (u32 hh = 0; hh < kHalves; ++hh)
#pragma unroll
            for (u32 i = 0; i < kAccRegs; ++i) tmp2[hh][i] = 0.f;
#endif
#endif

        u32 stage = 0, phase = 0, e = 0;         // ring position; epilogue chunk counter
#ifdef RC_TIMELINE
        u32 tl_n = 0;                                // this consumer's units so far
#define RC_STAMP(f, val) do { if (tid == 0 && tl_n < RC_TL_UNITS) \
            rc_timeline[((blockIdx.x * kConsumers + c) * RC_TL_UNITS + tl_n) * 5u + (f)] = (val); } while (0)
#define RC_NOW globaltimer_ns()
#else
#define RC_STAMP(f, val) do {} while (0)
#endif
        u32 turn_phase = 0;                          // ping-pong: hand-overs received
        int j = 0;                                   // position in this CTA's unit sequence
        for (int u = first_unit; u < units; u += unit_step, ++j) {
            const WorkUnit w = work_unit(u, tiles_m, tiles_n, group, tiles_dp, splits, k_blocks, tiles);
            if (STREAM_K && w.kb_count == 0) continue;   // stream-K: an empty unit (no stages, no epilogue)
            if (EPI_RING && (j > 0 || w.splits > 1)) asm volatile("trap;");   // the host's promise broken
            if (PINGPONG && (u32(j) & 1u) != c) {
                // The other consumer's unit: skip its stages of the ring.
                const u32 pos = stage + u32(w.kb_count);
                stage = pos % STAGES;
                phase ^= (pos / STAGES) & 1u;
                continue;
            }
            const TileCoord tc = w.tc;
            const int m0 = (tc.m * CLUSTER_M + int(rank_m)) * BLOCK_M;
            const int n0 = (tc.n * CLUSTER_N + int(rank_n)) * BLOCK_N;

            // -------------------------------------------------- mainloop
            // Ping-pong hand-over: a full[] wait by parity is only unambiguous
            // when the stage's previous fill has completed, so consumer c starts
            // on unit j only after the other consumer has seen the last stage of
            // unit j-1 full (turn[c]); then every earlier fill is complete.
            if (PINGPONG && j > 0) {
                mbar_wait(turn(c), turn_phase, "turn (ping-pong hand-over)");
                turn_phase ^= 1u;
            }
            RC_STAMP(0, u64(u));
            RC_STAMP(1, RC_NOW);
            // One k-block's wgmmas on stage s into d (this consumer's halves); the
            // block's first k-step adds to d only when `accumulate` (else it starts d).
            auto mma_kblock = [&](float (&d)[kHalves][kAccRegs], u32 s, bool accumulate) {
#pragma unroll
                for (u32 k = 0; k < RC_KSTEPS; ++k) {
#pragma unroll
                    for (u32 hh = 0; hh < kHalves; ++hh) {
                        const u32 half = PINGPONG ? hh : c;
#if A_KMAJOR
                        const u64 da = smem_desc_k128(smem_a(s) + half * 64u * 128u + 32u * k);
#else
                        const u64 da = smem_desc_mn128(smem_a(s) + half * kAtomBytes + 2048u * k, kAtomBytes);
#endif
#if B_KMAJOR
                        const u64 db = smem_desc_k128(smem_b(s) + 32u * k);
#else
                        const u64 db = smem_desc_mn128(smem_b(s) + 2048u * k, kAtomBytes);
#endif
                        RC_WGMMA(BLOCK_N)(d[hh], da, db, (accumulate || k > 0) ? 1u : 0u);
                    }
                }
            };
#if RC_BLOCK_SCALED
            {
                // Block-scaled mainloop: per k-block, wgmmas into a temporary, wait, promote into acc
                // (see "Block scales" in the header).  acc restarts at zero for every unit.
                const u32 srow = warp * 16u + lane / 4u;     // this thread's rows in a half: srow, srow + 8
                const bool cols_in = n0 < N;                 // false only for a 1x2 cluster's ghost column
                const float* sb_unit = sb + (size_t)(b_batched ? tc.l : 0) * (size_t)sb_l +
                                       (size_t)(n0 / 128) * (size_t)sb_n;
#pragma unroll
                for (u32 hh = 0; hh < kHalves; ++hh)
#pragma unroll
                    for (u32 i = 0; i < kAccRegs; ++i) acc[hh][i] = 0.f;
                // SB, one float per k-block for the whole tile, read from L2 BS_SB_AHEAD k-blocks
                // before it is used: sbq[q] is the scale of k-block kb + q.
                const int kbn = w.kb_count;
                auto sb_load = [&](int kb) -> float {
                    return (cols_in && kb < kbn) ? ld_cg_f32(sb_unit + (size_t)(w.kb_begin + kb) * (size_t)sb_k)
                                                 : 0.f;
                };
                float sbq[BS_SB_AHEAD + 1];
#pragma unroll
                for (int q = 0; q < BS_SB_AHEAD; ++q) sbq[q] = sb_load(q);
                // Wait for the next stage, read its two rows' SA per half, issue its wgmmas into t
                // (scale-d 0 at the first k-step); returns the stage and advances the ring.
                auto issue = [&](float (&t)[kHalves][kAccRegs], int kb, float (&sa0)[kHalves],
                                 float (&sa1)[kHalves]) -> u32 {
                    mbar_wait(full(stage), phase, "full (mainloop ring)");
                    if (PINGPONG && kb == kbn - 1 && tid == 0) mbar_arrive(turn(c ^ 1u));
#pragma unroll
                    for (u32 hh = 0; hh < kHalves; ++hh) {
                        const u32 half = PINGPONG ? hh : c;
                        sa0[hh] = ld_shared_f32(smem_sa(stage) + (half * 64u + srow) * 4u);
                        sa1[hh] = ld_shared_f32(smem_sa(stage) + (half * 64u + srow + 8u) * 4u);
                    }
                    wgmma_fence();
                    mma_kblock(t, stage, false);
                    wgmma_commit();
                    const u32 s = stage;
                    if (++stage == STAGES) { stage = 0; phase ^= 1u; }
                    return s;
                };
                // k-block kb's wgmmas (into t, from stage s) are complete: free the stage (after
                // fence.proxy.async: the SA slot was read through the generic proxy and the
                // producer's next TMA write into it is an async-proxy write), then promote in fp32,
                // one fma.rn.f32 per register: register i of a half holds row srow + 8 * ((i / 2) % 2)
                // (the accumulator layout the epilogue reads too).
                // (The fence is a MEMBAR.ALL.CTA in SASS every k-block; without it, H200 stop 16 ran
                // 0.987-1.010 with identical results: it stays.  Reading SB after it instead of before
                // ran no faster, stop 15.)
                auto retire = [&](const float (&t)[kHalves][kAccRegs], u32 s, const float (&sa0)[kHalves],
                                  const float (&sa1)[kHalves]) {
                    fence_proxy_async_smem();
                    if (lane == 0) release_stage(empty(s));
                    const float sbv = sbq[0];
#pragma unroll
                    for (int q = 0; q < BS_SB_AHEAD; ++q) sbq[q] = sbq[q + 1];
#pragma unroll
                    for (u32 hh = 0; hh < kHalves; ++hh) {
                        const float s0 = sa0[hh] * sbv, s1 = sa1[hh] * sbv;
#pragma unroll
                        for (u32 i = 0; i < kAccRegs; ++i) acc[hh][i] += t[hh][i] * ((i & 2u) ? s1 : s0);
                    }
                };
#if RC_BS_TWO_TMP
                // Two temporaries, roles fixed by unrolling by 2: k-block kb (even) in tmp, kb + 1 in
                // tmp2.  k-block kb + 1's wgmmas are issued before kb is promoted (wait_group 1: kb's
                // group is complete, kb + 1's may run on), so the tensor pipe has work while this
                // consumer waits and promotes.  The consumer holds at most two stages.  SB is read
                // BS_SB_AHEAD (here 1) promotions ahead, before each promotion instead of before each
                // issue.
                float sa0a[kHalves], sa1a[kHalves], sa0b[kHalves], sa1b[kHalves];
                u32 s_a = 0, s_b = 0;
                // k-block kb's wgmmas (into t) are complete (the caller waited): pin t, read SB
                // BS_SB_AHEAD promotions ahead, release the stage and promote.
                auto finish = [&](float (&t)[kHalves][kAccRegs], u32 s, const float (&sa0)[kHalves],
                                  const float (&sa1)[kHalves], int kb) {
                    fence_operand(t);
                    sbq[BS_SB_AHEAD] = sb_load(kb + BS_SB_AHEAD);
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
#else
                for (int kb = 0; kb < kbn; ++kb) {
                    sbq[BS_SB_AHEAD] = sb_load(kb + BS_SB_AHEAD);
                    float sa0[kHalves], sa1[kHalves];
                    const u32 s = issue(tmp, kb, sa0, sa1);
                    wgmma_wait<0>();
                    retire(tmp, s, sa0, sa1);
                }
#endif
            }
#else
            u32 prev = 0;
            for (int kb = 0; kb < w.kb_count; ++kb) {
                mbar_wait(full(stage), phase, "full (mainloop ring)");
                if (PINGPONG && kb == w.kb_count - 1 && tid == 0) mbar_arrive(turn(c ^ 1u));
                wgmma_fence();
                mma_kblock(acc, stage, kb > 0);
                wgmma_commit();
                if (kb > 0) {                    // the previous batch is done: free its stage
                    wgmma_wait<1>();
                    if (lane == 0) release_stage(empty(prev));
                }
                prev = stage;
                if (++stage == STAGES) { stage = 0; phase ^= 1u; }
            }
            wgmma_wait<0>();
            if (lane == 0) release_stage(empty(prev));
#endif

            // -------------------------------------------------- split-K fix-up
            // Per (tile, consumer) there is a flag and workspace of 64 x BLOCK_N fp32
            // per slot.  The order of the sum is fixed by the schedule, so results
            // are bit-identical run to run.
            //   spread (cooperative kernels whose splits of a tile all run at
            //   once, see `spread` above): split s stores its partial of the chunks
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
            // slower, H200 stop 14).
            RC_STAMP(2, RC_NOW);
            const ChunkRange chunks = epilogue_chunks(w, spread);
            const u32 ch_lo = chunks.lo, ch_hi = chunks.hi;
            if (w.splits > 1) {
                // This consumer's slot: its half (cooperative), or the tile's
                // first half (ping-pong: slots slot and slot + 1, one flag).
                const int slot = ((w.tile - tiles_dp) * RC_CLUSTER + int(rank)) * int(kConsumers) +
                                 int(PINGPONG ? 0u : c);
                int* flag = flags + slot;
#if RC_SPREAD
                if (chunks.spread) {
                    const int S = w.splits, me = w.split;
                    float* ws = workspace + (size_t)slot * size_t(S) * (64 * BLOCK_N);   // slot p at ws + p·64·BLOCK_N
                    float* mine = ws + (size_t)me * (64 * BLOCK_N);
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
                            const float* src = ws + (size_t)p * (64 * BLOCK_N);
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
#ifdef RAWCOOP_WATCHDOG
                            const u64 start = clock_cycles();
#endif
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
                                ld_cg_f32x4(ws_chain(workspace, slot) + hh * (64 * BLOCK_N) + (i * 128u + tid) * 4u,
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
                                st_cg_f32x4(ws_chain(workspace, slot) + hh * (64 * BLOCK_N) + (i * 128u + tid) * 4u,
                                            acc[hh][4 * i], acc[hh][4 * i + 1], acc[hh][4 * i + 2], acc[hh][4 * i + 3]);
                        named_barrier_sync(1 + c, 128);  // every thread's partial is written ...
                        if (tid == 0) st_release_gpu(flag, w.split + 1);   // ... before the flag moves
                        RC_STAMP(3, RC_NOW);
                        RC_STAMP(4, RC_NOW);
#ifdef RC_TIMELINE
                        ++tl_n;
#endif
                        continue;
                    }
                }
            }

            // -------------------------------------------------- epilogue
            RC_STAMP(3, RC_NOW);
            // EPI_RING: the staging buffers are A stages; every consumer's wgmmas are done with them.
            if (EPI_RING) named_barrier_sync(1 + kConsumers, 128 * kConsumers);
            const u32 row0 = warp * 16u + lane / 4u;     // this thread's rows in a half: row0, row0 + 8
            const int ld = tc.l;
#pragma unroll
            for (u32 hh = 0; hh < kHalves; ++hh) {
                const u32 half = PINGPONG ? hh : c;
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
                    for (u32 r = 0; r < cols / 2; ++r) v[r] = RC_ALPHA * acc[hh][jc * kChunkRegs + r];
#if HAS_C
                    {
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
#if C_COLMAJOR && OUT_TYPE == 2
                                c0 = ld_shared_f32(colmajor_f32(cb, row, cc));
                                c1 = ld_shared_f32(colmajor_f32(cb, row, cc + 1u));
#elif C_COLMAJOR
                                c0 = out16_to_f32(ld_shared_u16(swz(cb, cc, row * 2u)));
                                c1 = out16_to_f32(ld_shared_u16(swz(cb, cc + 1u, row * 2u)));
#elif OUT_TYPE == 2
                                ld_shared_f32x2(chunk_addr(cb, row, cc * 4u), c0, c1);
#else
                                const u32 p = ld_shared_u32(chunk_addr(cb, row, cc * 2u));
                                c0 = out16_to_f32((u16)(p & 0xFFFFu));
                                c1 = out16_to_f32((u16)(p >> 16));
#endif
                                v[r] += beta * c0;
                                v[r + 1] += beta * c1;
                            }
                        // The loader refills this buffer with a TMA load (async
                        // proxy) once c_empty completes: order our generic-proxy
                        // reads of it before that write (WAR across proxies).
                        // Without the fence ptxas may place the arrive right
                        // after the loads of the last chunk with no wait on them,
                        // and the refill overwrote C still being read (fp32
                        // output, fuzz seed 7 case 831; analysis in bench/NOTES.md).
                        fence_proxy_async_smem();
                        syncwarp();
                        if (lane == 0) mbar_arrive(c_empty(c, b));
                    }
#endif
#if BIAS && BIAS_ON_ROWS
                    const float bias_r0 = grow0 < M ? load_bias(bias, grow0) : 0.f;
                    const float bias_r1 = grow0 + 8 < M ? load_bias(bias, grow0 + 8) : 0.f;
#endif
#pragma unroll
                    for (u32 q = 0; q < cols / 8; ++q) {
#if BIAS && !BIAS_ON_ROWS
                        const int gcol = col0 + int(8u * q + 2u * (lane & 3u));
                        const float b0 = gcol < N ? load_bias(bias, gcol) : 0.f;        // same columns for
                        const float b1 = gcol + 1 < N ? load_bias(bias, gcol + 1) : 0.f;  // both rows
#endif
#pragma unroll
                        for (u32 h = 0; h < 2; ++h) {
                            const u32 r = q * 4u + h * 2u;
#if BIAS && BIAS_ON_ROWS
                            v[r] += h ? bias_r1 : bias_r0;
                            v[r + 1] += h ? bias_r1 : bias_r0;
#elif BIAS
                            v[r] += b0;
                            v[r + 1] += b1;
#endif
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
#if D_COLMAJOR && OUT_TYPE == 2
                            st_shared_f32(colmajor_f32(buf, row, cc), v[r]);
                            st_shared_f32(colmajor_f32(buf, row, cc + 1u), v[r + 1]);
#elif D_COLMAJOR
                            const u32 p = pack_out16(v[r], v[r + 1]);
                            st_shared_u16(swz(buf, cc, row * 2u), (u16)(p & 0xFFFFu));
                            st_shared_u16(swz(buf, cc + 1u, row * 2u), (u16)(p >> 16));
#elif OUT_TYPE == 2
                            st_shared_f32x2(chunk_addr(buf, row, cc * 4u), v[r], v[r + 1]);
#else
                            st_shared_u32(chunk_addr(buf, row, cc * 2u), pack_out16(v[r], v[r + 1]));
#endif
                        }
                    fence_proxy_async_smem();
                    named_barrier_sync(1 + c, 128);
                    if (tid == 0 && rows_in) {
#if D_COLMAJOR && OUT_TYPE == 2
                        // two 32-row boxes in one bulk group; the second only where it has rows
                        tma_store_3d(&map_d, buf, m0 + int(half * 64u), col0, ld);
                        if (m0 + int(half * 64u) + 32 < M)
                            tma_store_3d(&map_d, buf + 4096u, m0 + int(half * 64u) + 32, col0, ld);
#elif D_COLMAJOR
                        tma_store_3d(&map_d, buf, m0 + int(half * 64u), col0, ld);
#else
                        if (kNarrowBox) {                    // the chunk's own narrow boxes (see above)
#pragma unroll
                            for (u32 x = 0; x < cols / kBoxCols; ++x)
                                tma_store_3d(&map_d, buf + x * kBoxBytes, col0 + int(x * kBoxCols),
                                             m0 + int(half * 64u), ld);
                        } else {
                            tma_store_3d(&map_d, buf, col0, m0 + int(half * 64u), ld);
                        }
#endif
                        tma_store_commit();
                    }
                    ++e;                                     // chunks stored (C buffers, staging buffers)
                }
            }
            RC_STAMP(4, RC_NOW);
#ifdef RC_TIMELINE
            ++tl_n;
#endif
        }
        if (tid == 0) tma_store_wait_all();
    }
    // No CTA may leave while its peer can still arrive on its barriers.
    if (RC_CLUSTER > 1) cluster_sync();
}
