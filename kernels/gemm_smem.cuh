// Shared-memory map of gemm_kernel: the ring, the epilogue's buffers and the mbarriers.  Offsets
// from a 1024-byte aligned base (every 128B-swizzled tile starts on a 1024-byte boundary):
//
//   A stages | B stages | staging buffers | C buffers (HAS_C) | SA slots (block-scaled) | mbarriers
//
// mbarriers, 8 bytes each, in this order (counts and roles: gemm.cu):
//   full[STAGES], empty[STAGES], c_full[consumer][buffer], c_empty[consumer][buffer],
//   first_load, turn[consumer]
// The kernel's address lambdas (smem_a, full, c_buf, ...) compute from these offsets.
// rawcoop/plan/configs.py `_smem_layout` mirrors kSmemBytes.
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
#pragma once
#include "gemm_config.cuh"

constexpr u32 kEpiAll = kConsumers * kEpiBuffers * kEpiBytes;   // every consumer's staging buffers
constexpr u32 kOffA = 0;
constexpr u32 kOffB = kOffA + kStages * kABytes;
constexpr u32 kOffRingEnd = kOffB + kStages * kBBytes;
constexpr u32 kOffEpi = kEpiRing ? kOffA : kOffRingEnd;
constexpr u32 kOffC = kEpiRing ? kOffRingEnd : kOffEpi + kEpiAll;
static_assert(!kEpiRing || (kEpiAll <= kStages * kABytes && !kPingPong && !kStreamK && kBlockM == 128),
              "EPI_RING: cooperative 128-row data-parallel tiles whose A stages hold the staging buffers");
#if RC_BLOCK_SCALED   // a cubin symbol, in block-scaled kernels only (see kSABytes)
constexpr u32 kOffSA = kOffC + (kHasC ? kEpiAll : 0);
constexpr u32 kOffBar = kOffSA + kStages * kSABytes;
#else
constexpr u32 kOffBar = kOffC + (kHasC ? kEpiAll : 0);
#endif
constexpr u32 kBarCount = 2 * kStages + 2 * kConsumers * kEpiBuffers + 1 + kConsumers;
constexpr u32 kSmemBytes = kOffBar + kBarCount * 8 + 1024;   // + alignment slack
static_assert(kSmemBytes <= 232448, "shared memory over the sm_90 per-block limit");
