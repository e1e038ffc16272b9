// rawcoop device-side vocabulary: thin, named wrappers over the Hopper PTX we
// use (mbarrier, TMA, clusters, fences).  No CUDA headers: NVRTC compiles this
// with -minimal, so everything needed is declared here.
#pragma once

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

// A CUtensorMap as a kernel parameter: 128 opaque bytes, 64-byte aligned,
// passed by value as `const __grid_constant__ TmaMap`.
struct __align__(64) TmaMap { u64 opaque[16]; };

#define RC_DEVICE static __device__ __forceinline__

// ---------------------------------------------------------------- addresses
RC_DEVICE u32 smem_u32(const void* p) {
    u32 r;
    asm volatile("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}

// ---------------------------------------------------------------- clusters
RC_DEVICE u32 cluster_ctarank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// All threads of all CTAs of the cluster.
RC_DEVICE void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// ---------------------------------------------------------------- mbarrier
RC_DEVICE void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}

// Makes barrier initialisation visible to the async proxy and the cluster.
RC_DEVICE void fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Announce `bytes` of incoming TMA data, then arrive once.
RC_DEVICE void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}

RC_DEVICE void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}

// Arrive on the barrier at the same shared-memory offset in CTA `cta` of the cluster.
RC_DEVICE void mbar_arrive_cluster(u32 bar, u32 cta) {
    asm volatile("{ .reg .b32 ra; mapa.shared::cluster.u32 ra, %0, %1;\n\t"
                 "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra]; }"
                 :: "r"(bar), "r"(cta) : "memory");
}

// The same, with the default .release.cta semantics: enough to hand a buffer
// back (the data dependence is already resolved by a wgmma wait), and much
// cheaper than a cluster-scope release on a hot path.
RC_DEVICE void mbar_arrive_remote(u32 bar, u32 cta) {
    asm volatile("{ .reg .b32 ra; mapa.shared::cluster.u32 ra, %0, %1;\n\t"
                 "mbarrier.arrive.shared::cluster.b64 _, [ra]; }"
                 :: "r"(bar), "r"(cta) : "memory");
}

RC_DEVICE bool mbar_try_wait(u32 bar, u32 parity) {
    u32 ok;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p; }" : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
    return ok != 0;
}

RC_DEVICE u64 clock_cycles() {
    u64 t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
    return t;
}

#ifdef RAWCOOP_WATCHDOG
// Watchdog mode (RAWCOOP_WATCHDOG=1 at compile time): a wait that outlasts
// RAWCOOP_WATCHDOG clock cycles prints which barrier and traps, so a protocol
// bug ends the kernel with an error instead of hanging the GPU.
extern "C" __device__ int vprintf(const char*, const char*);
static __device__ __noinline__ void watchdog_trap(const char* what, u32 where, u32 parity) {
    struct { const char* what; u32 where; u32 parity; u32 block; u32 thread; } args = {
        what, where, parity, blockIdx.x, threadIdx.x};
    vprintf("rawcoop watchdog: waited too long on %s (shared 0x%x, parity %u) in block %u thread %u\n",
            reinterpret_cast<const char*>(&args));
    asm volatile("trap;");
}
// RC_WATCH_START(start) declares the wait's start time; RC_WATCH(start, ...) traps past the budget.
#define RC_WATCH_START(start) const u64 start = clock_cycles()
#define RC_WATCH(start, what, where, parity) \
    if (clock_cycles() - (start) > (u64)(RAWCOOP_WATCHDOG)) watchdog_trap((what), (where), (parity))
#else
#define RC_WATCH_START(start)
#define RC_WATCH(start, what, where, parity)
#endif

// Wait until the phase with parity `parity` of `bar` has completed.  `what`
// names the barrier for the watchdog.
RC_DEVICE void mbar_wait(u32 bar, u32 parity, const char* what = "mbarrier") {
    RC_WATCH_START(start);
    while (!mbar_try_wait(bar, parity)) {
        RC_WATCH(start, what, bar, parity);
    }
}

// ---------------------------------------------------------------- TMA
RC_DEVICE void tma_prefetch_map(const TmaMap* map) {
    asm volatile("prefetch.tensormap [%0];" :: "l"(map) : "memory");
}

RC_DEVICE void tma_load_2d(u32 dst, const TmaMap* map, u32 bar, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];"
                 :: "r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1) : "memory");
}

RC_DEVICE void tma_load_3d(u32 dst, const TmaMap* map, u32 bar, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5}], [%2];"
                 :: "r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2) : "memory");
}

// Load a box and deliver it (data and complete_tx) to the same shared-memory
// offsets in every CTA of the cluster whose bit is set in `mask`.
RC_DEVICE void tma_load_2d_multicast(u32 dst, const TmaMap* map, u32 bar, int c0, int c1, u16 mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%3, %4}], [%2], %5;"
                 :: "r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1), "h"(mask) : "memory");
}

RC_DEVICE void tma_load_3d_multicast(u32 dst, const TmaMap* map, u32 bar, int c0, int c1, int c2, u16 mask) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%3, %4, %5}], [%2], %6;"
                 :: "r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "h"(mask) : "memory");
}

RC_DEVICE void tma_store_3d(const TmaMap* map, u32 src, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];"
                 :: "l"(map), "r"(src), "r"(c0), "r"(c1), "r"(c2) : "memory");
}

RC_DEVICE void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Wait until at most N committed store groups still read shared memory.
template <int N>
RC_DEVICE void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory"); }

// Wait until all committed stores have completed (global writes done).
RC_DEVICE void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// Order this thread's generic-proxy shared-memory accesses before later
// async-proxy accesses of the same memory, both ways: writes before a TMA
// store or wgmma reads them (RAW), and reads before a TMA load overwrites the
// buffer (WAR: the C buffers' refill).
RC_DEVICE void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// ---------------------------------------------------------------- warpgroups
// Register reconfiguration: every warp of the warpgroup executes the same one.
template <int N>
RC_DEVICE void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N)); }
template <int N>
RC_DEVICE void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N)); }

// Named barrier among `threads` threads (a multiple of 32); id 0 is __syncthreads.
RC_DEVICE void named_barrier_sync(u32 id, u32 threads) {
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");
}

// Pin the registers of an accumulator array at this point of the program: the
// compiler may not move reads or writes of them across it (place after a
// wgmma.wait_group, before the results are read, so nothing touches registers
// that an in-flight wgmma still writes).
template <int H, int R>
RC_DEVICE void fence_operand(float (&t)[H][R]) {
#pragma unroll
    for (int h = 0; h < H; ++h)
#pragma unroll
        for (int i = 0; i < R; ++i) asm volatile("" : "+f"(t[h][i]) :: "memory");
}

RC_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
RC_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
RC_DEVICE void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }

// Descriptor for an MN-major tile in the 128-byte swizzle layout: 64 MN
// elements (128 B) per line, one line per K index, 8-line atoms 1024 B apart
// along K (SBO), `lbo` bytes between 64-wide atoms along M/N (LBO).
RC_DEVICE u64 smem_desc_mn128(u32 addr, u32 lbo) {
    return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)((lbo & 0x3FFFFu) >> 4) << 16) |
           ((u64)(1024u >> 4) << 32) | ((u64)1 << 62);
}

// Shared-memory matrix descriptor for a K-major tile in the 128-byte swizzle
// layout: rows of 128 B, 8-row atoms 1024 B apart (SBO), LBO unused (1),
// base offset 0 (tiles are 1024-byte aligned), layout type 1 = SWIZZLE_128B.
RC_DEVICE u64 smem_desc_k128(u32 addr) {
    return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)1 << 16) | ((u64)(1024u >> 4) << 32) | ((u64)1 << 62);
}

// ---------------------------------------------------------------- conversions
// Two fp32 -> packed pair, `lo` in the low 16 bits (cvt puts its first source high).
RC_DEVICE u32 pack_bf16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
RC_DEVICE u32 pack_f16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

RC_DEVICE void st_shared_u32(u32 addr, u32 v) {
    asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr), "r"(v) : "memory");
}
RC_DEVICE void st_shared_u16(u32 addr, u16 v) {
    asm volatile("st.shared.b16 [%0], %1;" :: "r"(addr), "h"(v) : "memory");
}
RC_DEVICE void st_shared_f32(u32 addr, float v) {
    asm volatile("st.shared.f32 [%0], %1;" :: "r"(addr), "f"(v) : "memory");
}
RC_DEVICE void st_shared_f32x2(u32 addr, float a, float b) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(addr), "f"(a), "f"(b) : "memory");
}
RC_DEVICE u32 ld_shared_u32(u32 addr) {
    u32 v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
RC_DEVICE u16 ld_shared_u16(u32 addr) {
    u16 v;
    asm volatile("ld.shared.b16 %0, [%1];" : "=h"(v) : "r"(addr) : "memory");
    return v;
}
RC_DEVICE void ld_shared_f32x2(u32 addr, float& a, float& b) {
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(a), "=f"(b) : "r"(addr) : "memory");
}
RC_DEVICE float ld_shared_f32(u32 addr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
}

RC_DEVICE float u32_as_f32(u32 u) {
    float f;
    asm("mov.b32 %0, %1;" : "=f"(f) : "r"(u));
    return f;
}

RC_DEVICE void syncwarp() { asm volatile("bar.warp.sync 0xffffffff;" ::: "memory"); }

// ---------------------------------------------------------------- global sync (split-K fix-up)
RC_DEVICE int ld_acquire_gpu(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
RC_DEVICE void st_release_gpu(int* p, int v) {
    asm volatile("st.release.gpu.global.s32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
// x, which must be the same in every lane of the warp, in a form ptxas can
// prove warp-uniform (redux.sync's result is): values derived from threadIdx
// (a warpgroup's index) are not, and control flow on them keeps the loop
// state that depends on it off the uniform datapath.  (UNIFORM_CONSUMER: with
// the consumer index through here the ping-pong mainloop's wgmma descriptors
// move to U* instructions, 74 -> 57 instructions per k-block, and the
// cooperative ones lose their R2UR copies; measured on the H200: ping-pong
// 4096x14336x4096 +1.7%, so on by default there.)
RC_DEVICE u32 warp_uniform(u32 x) {
    u32 r;
    asm volatile("redux.sync.min.u32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(x));
    return r;
}

RC_DEVICE u64 globaltimer_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
RC_DEVICE void nanosleep_ns(u32 ns) { asm volatile("nanosleep.u32 %0;" :: "r"(ns)); }
// Count up a flag after this thread's (and, through a preceding barrier, its
// warpgroup's) workspace stores: they are visible to whoever acquires the new count.
RC_DEVICE void red_add_release_gpu(int* p, int v) {
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
RC_DEVICE int atom_add_relaxed_gpu(int* p, int v) {
    int old;
    asm volatile("atom.relaxed.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

// L2-only (bypass the non-coherent L1) global accesses.
RC_DEVICE float ld_cg_f32(const float* p) {
    float a;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(a) : "l"(p) : "memory");
    return a;
}
RC_DEVICE void ld_cg_f32x4(const float* p, float& a, float& b, float& c, float& d) {
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "l"(p) : "memory");
}
RC_DEVICE void st_cg_f32x4(float* p, float a, float b, float c, float d) {
    asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}

// Programmatic dependent launch: wait for the previous grid's memory; let
// the next grid start launching.  Both are no-ops without the launch attribute.
RC_DEVICE void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
RC_DEVICE void griddep_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
