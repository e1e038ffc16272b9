"""CPU: clusters of two CTAs.  1x2 (CLUSTER_N = 2: horizontally adjacent
tiles multicast the shared A tile) next to 2x1 (CLUSTER_M = 2: vertically
adjacent tiles multicast B): the configurations, the ``_cluster`` option, the
PTX (which operand is multicast), and the host mirror of the cluster schedule
(every (tile, k-block) exactly once, both CTAs of a pair on the same units,
ghost tiles, split-K slots per (tile, rank))."""
import random
import re
from collections import Counter
from dataclasses import replace

import pytest

from rawcoop import compiler
from helpers.plan import gc as gc
from rawcoop.plan import scheduler
from rawcoop.compiler import KernelSpec
from rawcoop.plan.scheduler import cdiv

from helpers.stub import BF16, E4M3, E5M2, StubArray, build, stub_planning, tn

CLUSTER_N_CONFIGS = [c for c in gc.epilogue_configs() + gc.lowp_epilogue_configs() if c.cluster_n == 2]
CLUSTER_M_CONFIGS = [c for c in gc.epilogue_configs() + gc.lowp_epilogue_configs() if c.cluster_m == 2]


# ---------------------------------------------------------------- configurations
def test_cluster_n_configs_cover_the_variants():
    cfgs = CLUSTER_N_CONFIGS
    assert {c.a_kmajor for c in cfgs} == {True, False}           # A (the multicast operand): rows / atoms
    assert {c.b_kmajor for c in cfgs} == {True, False}
    assert {c.block_n for c in cfgs} == {64, 128, 256}
    assert any(c.pingpong for c in cfgs) and any(c.pingpong and c.has_c for c in cfgs)
    assert any(c.has_c and c.bias and c.act for c in cfgs)
    assert {c.in_kind for c in cfgs} >= {gc.FP16, gc.BF16, gc.TF32, gc.E4M3, gc.E5M2}
    assert all(c.cluster == (1, 2) and c.cluster_size == 2 for c in cfgs)


def test_existing_specs_carry_no_cluster_n_define():
    """CLUSTER_N is defined only when it is 2: every other spec, and so its
    cache key, is what it was before 1x2 clusters existed."""
    for c in gc.all_configs() + gc.lowp_configs() + CLUSTER_M_CONFIGS:
        if c.cluster_n == 1:                # (all_configs has the 1x2 kernels choose_cluster picks)
            assert "CLUSTER_N" not in dict(c.spec.defines)
    for c in CLUSTER_N_CONFIGS:
        d = dict(c.spec.defines)
        assert d["CLUSTER_N"] == 2 and d["CLUSTER_M"] == 1


def test_config_rejects_bad_clusters():
    with pytest.raises(ValueError, match="1x1, 2x1 or 1x2"):
        gc.GemmConfig(128, True, cluster_m=2, cluster_n=2)
    with pytest.raises(ValueError, match="1x1, 2x1 or 1x2"):
        gc.GemmConfig(128, True, cluster_n=4)
    with pytest.raises(ValueError, match="128- or 256-wide"):
        gc.GemmConfig(64, True, cluster_m=2)
    assert gc.GemmConfig(64, True, cluster_n=2).cluster == (1, 2)     # 1x2 splits A: any tile width


def test_cluster_option_normalisation():
    assert gc.cluster_dims(None) == gc.cluster_dims(1) == gc.cluster_dims((1, 1)) == (1, 1)
    assert gc.cluster_dims(2) == gc.cluster_dims((2, 1)) == gc.cluster_dims([2, 1]) == (2, 1)   # 2 keeps meaning 2x1
    assert gc.cluster_dims((1, 2)) == (1, 2)
    np = pytest.importorskip("numpy")
    assert gc.cluster_dims(np.int64(2)) == (2, 1) and gc.cluster_dims((np.int32(1), np.int32(2))) == (1, 2)
    for bad in (0, 3, 4, True, (2, 2), (1, 4), (1,), "2", 2.0):
        with pytest.raises(ValueError, match="_cluster"):
            gc.cluster_dims(bad)


def test_kernel_rejects_two_by_two():
    """The kernel's own static_assert (at most one of CLUSTER_M, CLUSTER_N is 2)."""
    spec = gc.GemmConfig(128, True, cluster_n=2).spec
    bad = KernelSpec(spec.source, spec.name, tuple((k, 2 if k == "CLUSTER_M" else v) for k, v in spec.defines))
    with pytest.raises(compiler.CompileError, match="clusters: 1x1, 2x1"):
        compiler.compile_spec(bad)


# ---------------------------------------------------------------- PTX
_MULTICAST = re.compile(r"cp\.async\.bulk\.tensor\.3d\.shared::cluster\.global\.mbarrier::complete_tx::bytes"
                        r"\.multicast::cluster \[[^\]]+\], \[(%rd\d+),")
_LOAD = re.compile(r"cp\.async\.bulk\.tensor\.3d\.shared::cluster\.global\.mbarrier::complete_tx::bytes "
                   r"\[[^\]]+\], \[(%rd\d+),")


def _param_of(ptx: str, reg: str) -> int:
    """Which kernel parameter (0 map_a, 1 map_b, 2 map_c, ...) a tensor-map
    register holds, following the mov / cvta.param chain."""
    for _ in range(8):
        m = re.search(r"(?:mov\.b64|mov\.u64|cvta\.param\.u64)\s+" + re.escape(reg) + r",\s*([%\w]+);", ptx)
        assert m, f"cannot trace {reg}"
        src = m.group(1)
        p = re.fullmatch(r"gemm_kernel_param_(\d+)", src)
        if p:
            return int(p.group(1))
        reg = src
    raise AssertionError(f"cannot trace {reg}")


@pytest.mark.parametrize("cfg", CLUSTER_N_CONFIGS + CLUSTER_M_CONFIGS, ids=lambda c: c.spec.label)
def test_cluster_multicasts_the_shared_operand(cfg):
    """1x2 kernels multicast A (parameter 0) and load B plainly; 2x1 kernels
    the other way round.  Cluster rank, remote arrives, cluster barriers; no
    spills; setmaxnreg honoured."""
    r = compiler.compile_spec(cfg.spec, want_ptx=True)
    for instr in ["multicast::cluster", "mapa.shared::cluster", "mbarrier.arrive.shared::cluster",
                  "barrier.cluster.arrive.release.aligned", "barrier.cluster.wait.acquire.aligned",
                  "%cluster_ctarank", "fence.mbarrier_init.release.cluster"]:
        assert instr in r.ptx, f"{instr!r} not in the PTX of {cfg.spec.label}"
    shared, own = (0, 1) if cfg.cluster_n == 2 else (1, 0)
    multicast = {_param_of(r.ptx, reg) for reg in _MULTICAST.findall(r.ptx)}
    plain = {_param_of(r.ptx, reg) for reg in _LOAD.findall(r.ptx)}
    assert multicast == {shared}
    assert own in plain and shared not in plain
    assert plain <= {own, 2}                     # + map_c for the epilogue's C loads
    assert (2 in plain) == cfg.has_c
    usage = r.resources
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage
    assert "C7508" not in r.log and "C7517" not in r.log, r.log
    assert cfg.smem_bytes <= gc.SMEM_LIMIT


def test_unclustered_kernels_load_without_multicast():
    r = compiler.compile_spec(gc.GemmConfig(128, True).spec, want_ptx=True)
    assert "multicast::cluster" not in r.ptx and "barrier.cluster" not in r.ptx and "mapa" not in r.ptx
    assert {_param_of(r.ptx, reg) for reg in _LOAD.findall(r.ptx)} == {0, 1}


# ---------------------------------------------------------------- schedule
def _check_cluster_schedule(m, n, bn, batches, k, block_k, slots, group, splits, cluster):
    cm, cn = cluster
    sched = scheduler.schedule(m, n, 128, bn, slots, group, batches, k=k, block_k=block_k, splits=splits,
                               cluster=cluster)
    dec = sched.decomposition
    real_m, real_n = cdiv(m, 128), cdiv(n, bn)
    assert (sched.tiles_m, sched.tiles_n) == (cdiv(real_m, cm), cdiv(real_n, cn))
    assert sched.ctas == sched.grid * cm * cn and sched.grid == min(slots, dec.units)
    if cluster == (2, 1):           # what the host computed before 1x2 existed: rows of 256
        old = scheduler.schedule(m, n, 256, bn, slots, group, batches, k=k, block_k=block_k, splits=splits)
        assert (old.tiles_m, old.tiles_n, old.group, old.grid, old.decomposition) == \
               (sched.tiles_m, sched.tiles_n, sched.group, sched.grid, dec)
    k_blocks = cdiv(k, block_k)
    ranges = {}                     # kernel tile -> its units' k-block ranges
    slots_seen = Counter()
    epilogues = Counter()
    walks = [sched.cta_units(cta) for cta in range(sched.ctas)]
    for cta, units in enumerate(walks):
        rank = cta % (cm * cn)
        peer = walks[cta ^ 1] if cm * cn == 2 else units
        # Both CTAs of a cluster: the same units, k-ranges and splits (ring and consumer agree)
        assert [(u[0],) + u[4:] for u in units] == [(u[0],) + u[4:] for u in peer]
        for (u, l, tm, tn, split, splits, kb0, kbn), pu in zip(units, peer):
            # ... on the two tiles of one pair: same batch, adjacent along the cluster's axis
            if cm * cn == 2:
                if cn == 2:
                    assert (pu[1], pu[2]) == (l, tm) and {tn, pu[3]} == {tn - tn % 2, tn - tn % 2 + 1}
                    assert tn % 2 == rank
                else:
                    assert (pu[1], pu[3]) == (l, tn) and {tm, pu[2]} == {tm - tm % 2, tm - tm % 2 + 1}
                    assert tm % 2 == rank
            assert kbn >= 1
            ranges.setdefault((l, tm, tn), []).append((kb0, kbn))
            if split == splits - 1:
                epilogues[(l, tm, tn)] += 1
            if splits > 1:
                tile = dec.unit(u)[0]
                for c in range(scheduler.CONSUMERS):
                    slots_seen[(sched.workspace_slot(tile, rank, c), split)] += 1
    all_tiles = [(l, i, j) for l in range(batches) for i in range(sched.tiles_m * cm)
                 for j in range(sched.tiles_n * cn)]
    # every (tile, k-block) of every tile, ghosts included, exactly once: a tile's
    # ranges, in order, tile [0, k_blocks) without gap or overlap
    assert sorted(ranges) == sorted(all_tiles)
    for t, rs in ranges.items():
        end = 0
        for kb0, kbn in sorted(rs):
            assert kb0 == end, f"tile {t}: k-blocks {end}..{kb0} missing or overlapping"
            end = kb0 + kbn
        assert end == k_blocks, f"tile {t}: covers {end} of {k_blocks} k-blocks"
    assert sorted(epilogues) == sorted(all_tiles) and set(epilogues.values()) == {1}
    ghosts = {t for t in all_tiles if t[1] >= real_m or t[2] >= real_n}
    if cluster == (1, 2):
        assert bool(ghosts) == (real_n % 2 == 1)
        assert all(t[2] == real_n for t in ghosts) and len(ghosts) == batches * real_m * (real_n % 2)
    elif cluster == (2, 1):
        assert bool(ghosts) == (real_m % 2 == 1)
        assert all(t[1] == real_m for t in ghosts)
    # split-K: one slot (and flag) per (split tile, rank, consumer), inside the workspace the host sizes
    if dec.splits > 1:
        assert set(slots_seen.values()) == {1}
        per_slot = Counter(s for s, _ in slots_seen)
        assert set(per_slot.values()) == {dec.splits}          # each split of the tile uses it once
        assert set(per_slot) == set(range(dec.flag_count() * cm * cn))
        assert dec.workspace_floats(bn) * cm * cn == len(per_slot) * 64 * bn
    return sched, bool(ghosts)


@pytest.mark.parametrize("cluster", [(1, 2), (2, 1), (1, 1)])
def test_cluster_schedule_covers_every_tile_kblock_once(cluster):
    """Host mirror of the kernel's cluster walk (first unit blockIdx.x / 2,
    step gridDim.x / 2, rank = blockIdx.x % 2 picks the tile of the pair) for
    random problems: odd and even tile columns (1x2) / rows (2x1), batches,
    forced and automatic split-K, raster groups."""
    rng = random.Random(11 + 7 * cluster[1] + cluster[0])
    odd = even = split = 0
    for _ in range(250):
        bn = rng.choice([64, 128, 256] if cluster[0] == 1 else [128, 256])
        m, n = rng.randint(1, 3000), rng.randint(1, 3000)
        batches = rng.choice([1, 1, 2, 3])
        k = rng.choice([1, 64, 65, rng.randint(1, 40000)])
        block_k = rng.choice([32, 64, 128])
        slots = rng.choice([1, 3, 33, 66, 132])
        group = rng.choice([None, 1, 2, 3, 8, 16])
        splits = rng.choice([None, None, None, 1, 2, 3, 4, 7])
        sched, ghost = _check_cluster_schedule(m, n, bn, batches, k, block_k, slots, group, splits, cluster)
        odd += ghost
        even += not ghost
        split += sched.decomposition.splits > 1
    if cluster != (1, 1):
        assert odd >= 30 and even >= 30
    assert split >= 30


@pytest.mark.parametrize("shape", [(1000, 1304, 520), (384, 256, 64), (2000, 130, 1000), (520, 384, 300),
                                   (600, 520, 4096), (4096, 4096, 4096)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("bn", [128, 256])
def test_cluster_n_schedule_of_the_gpu_test_shapes(shape, bn):
    """The shapes tests/gpu/test_cluster_gpu.py runs with 1x2 clusters, with the
    H200's 66 resident clusters: covered exactly once, split and unsplit, and
    between them ghost columns for both tile widths."""
    m, n, k = shape
    for splits in (None, 2, 3):
        for batches in (1, 2):
            _check_cluster_schedule(m, n, bn, batches, k, 64, 66, None, splits, (1, 2))


def test_cluster_n_gpu_shapes_include_ghost_columns():
    shapes = [(1000, 1304), (384, 256), (2000, 130), (520, 384), (600, 520)]
    for bn in (128, 256):
        assert any(cdiv(n, bn) % 2 == 1 for _, n in shapes) and any(cdiv(n, bn) % 2 == 0 for _, n in shapes)


# ---------------------------------------------------------------- planning (GPU calls recorded)
RESIDENT_CLUSTERS = 66


@pytest.fixture
def planning(monkeypatch):
    """The stub planning harness of tests/helpers/stub.py (maps and
    occupancy queries recorded)."""
    return stub_planning(monkeypatch, RESIDENT_CLUSTERS)


def _sched_grid(plan):
    """The kernel's unit stride: launched CTAs / CTAs per cluster."""
    return plan.grid[0] // plan.cluster[0]


def _sched_of(plan):
    km, kn, k, batch, tiles_m, tiles_n, group = plan.scalars[:7]
    return tiles_m, tiles_n, group


@pytest.mark.parametrize("order_a", "CF")
@pytest.mark.parametrize("bn", [128, 256])
def test_plan_cluster_n(planning, order_a, bn):
    """1x2: A's K-major box is 64 rows (half the tile), B's is the whole tile;
    tiles_n counts column pairs (11 columns of 128 -> 6 pairs, a ghost; 6
    columns of 256 -> 3 pairs);
    the grid is 2 x min(resident clusters, units), launched in clusters of
    (2, 1, 1)."""
    a = StubArray((1000, 520), BF16, order=order_a)
    b = StubArray((520, 1304), BF16, order="F")
    plan = build(a, b, _cluster=(1, 2), _swap=False, _block_n=bn, _pingpong=False)
    cfg = plan.cfg
    assert cfg.cluster == (1, 2) and dict(cfg.spec.defines)["CLUSTER_N"] == 2
    assert cfg.a_kmajor == (order_a == "C")
    map_a, map_b = planning.maps[:2]
    assert map_a.box == (64, 64, 1)      # K-major: (BLOCK_K, 64 of the 128 rows); M-major: one 64x64 atom box
    assert map_a.dims == ((520, 1000, 1) if order_a == "C" else (1000, 520, 1))
    assert map_b.box == (64, bn, 1)
    tiles_m, tiles_n, _ = _sched_of(plan)
    assert (tiles_m, tiles_n) == (8, cdiv(cdiv(1304, bn), 2))
    units = plan.decomposition.units
    assert plan.grid == (2 * min(RESIDENT_CLUSTERS, units), 1, 1) and plan.cluster == (2, 1, 1)
    assert planning.queries == [(gc.THREADS, cfg.smem_bytes, (2, 1, 1))]


def test_plan_cluster_n_kmajor_box_is_half_the_a_tile(planning):
    """K-major A box rows: 128 without a cluster or with 2x1, 64 with 1x2 (the
    box is (BLOCK_K, rows) = (64, 64) then, the same numbers as an M-major
    atom, so check the unclustered 128 and the 2x1 B half explicitly)."""
    a = StubArray((1000, 520), BF16)
    b = StubArray((520, 1304), BF16, order="F")
    build(a, b, _block_n=256, _pingpong=False)
    assert planning.maps[0].box == (64, 128, 1) and planning.maps[1].box == (64, 256, 1)
    planning.maps.clear()
    build(a, b, _block_n=256, _pingpong=False, _cluster=2, _swap=False)
    assert planning.maps[0].box == (64, 128, 1) and planning.maps[1].box == (64, 128, 1)
    planning.maps.clear()
    build(a, b, _block_n=256, _pingpong=False, _cluster=(1, 2), _swap=False)
    assert planning.maps[0].box == (64, 64, 1) and planning.maps[1].box == (64, 256, 1)


def test_plan_cluster_two_is_two_by_one(planning):
    a = StubArray((1000, 520), BF16)
    b = StubArray((520, 1304), BF16, order="F")
    p2 = build(a, b, _cluster=2, _block_n=128, _swap=False)
    p21 = build(a, b, _cluster=(2, 1), _swap=False, _block_n=128)
    assert p2.cfg == p21.cfg and p2.cfg.cluster == (2, 1) and "CLUSTER_N" not in dict(p2.cfg.spec.defines)
    assert p2.scalars == p21.scalars and p2.grid == p21.grid and p2.cluster == (2, 1, 1)
    assert _sched_of(p2)[:2] == (4, 11)                 # 8 tile rows -> 4 pairs; 11 columns


@pytest.mark.parametrize("cluster", [(1, 2), (2, 1)])
def test_plan_cluster_split_k_workspace_per_rank(planning, cluster):
    a = StubArray((600, 4096), BF16)
    b = StubArray((4096, 520), BF16, order="F")
    plan = build(a, b, _cluster=cluster, _splits=3, _block_n=128, _swap=False)
    dec = plan.decomposition
    assert dec.splits == 3 and dec.tiles == 3 * 5        # 5 x 5 tiles: 3 pairs of rows (2x1) / of columns (1x2)
    # 45 split units on at most 66 clusters: the cooperative kernel spreads the reduction (a slot per split)
    assert dec.spread(_sched_grid(plan)) and not plan.cfg.pingpong
    assert plan.ws_floats == dec.workspace_floats(128, spread=True) * 2 == 3 * dec.workspace_floats(128) * 2
    assert plan.ws_flags == dec.flag_count() * 2


def test_plan_cluster_n_lowp_boxes(planning):
    a, b = tn(1000, 1100, 2000, "float32")
    plan = build(a, b, precision="tf32", _cluster=(1, 2), _swap=False, _block_n=256)
    assert plan.cfg.cluster == (1, 2) and plan.cfg.in_kind == gc.TF32
    assert planning.maps[0].box == (32, 64, 1) and planning.maps[1].box == (32, 256, 1)
    planning.maps.clear()
    a, b = tn(1000, 1100, 4096, E4M3, E5M2)
    plan = build(a, b, _cluster=(1, 2), _swap=False, _block_n=128, _pingpong=True)
    assert plan.cfg.cluster == (1, 2) and plan.cfg.pingpong and (plan.cfg.in_kind, plan.cfg.b_kind) == (3, 4)
    assert planning.maps[0].box == (128, 64, 1) and planning.maps[1].box == (128, 128, 1)


def test_plan_cluster_n_narrow_tile_swap_ab(planning):
    """1x2 splits A (always 128 rows), so 64-wide tiles are allowed; with
    swap-AB the kernel's N is the user's M (48): one column pair whose second
    tile is a ghost."""
    a = StubArray((48, 2000), BF16)
    b = StubArray((2000, 1000), BF16)
    plan = build(a, b, _cluster=(1, 2), _block_n=64, _swap=True)
    assert plan.cfg.cluster == (1, 2) and plan.cfg.block_n == 64 and plan.cfg.d_colmajor
    assert _sched_of(plan)[:2] == (cdiv(1000, 128), 1)


@pytest.mark.parametrize("bad", [(2, 2), 3, (1, 4), "2", 0])
def test_plan_rejects_bad_cluster(planning, bad):
    a = StubArray((256, 64), BF16)
    b = StubArray((64, 256), BF16)
    with pytest.raises(ValueError, match="_cluster"):
        build(a, b, _cluster=bad, _swap=False)
    assert planning.queries == []


def test_plan_rejects_two_by_one_narrow_tiles(planning):
    a = StubArray((256, 64), BF16)
    b = StubArray((64, 256), BF16)
    with pytest.raises(ValueError, match=r"_cluster=\(2, 1\)\): a 2x1 cluster \(B multicast\) needs a 128- or 256-wide"):
        build(a, b, _cluster=(2, 1), _swap=False, _block_n=64)
    with pytest.raises(ValueError, match="_cluster=2\\)"):
        build(a, b, _cluster=2, _block_n=64, _swap=False)
    build(a, b, _cluster=(1, 2), _swap=False, _block_n=64)           # 1x2 is fine






def test_plan_one_row_pair_ring_falls_back(monkeypatch):
    """Staging in the ring needs one whole tile per CTA: with fewer clusters
    resident (60) than the 64 tile pairs, the plan runs the kernel with its
    own staging buffers (8 stages), whose occupancy it queries anew."""
    planning = stub_planning(monkeypatch, 60)
    a, b = tn(128, 8192, 8192, BF16)
    plan = build(a, b, _swap=True, _block_n=64, _cluster=(1, 2), _pingpong=False)
    assert plan.colmajor_d and plan.cfg.cluster == (1, 2) and plan.grid == (120, 1, 1)
    assert not plan.cfg.epi_ring and plan.cfg.stages == gc.MAX_STAGES == 8
    assert "EPI_RING" not in dict(plan.kernel.spec.defines)
    assert [q[1] for q in planning.queries] == [replace(plan.cfg, epi_ring=True, stages=0).smem_bytes,
                                               plan.cfg.smem_bytes]


def test_epi_ring_kernel_compiles():
    """The ring-staging kernel (EPI_RING=1, 9 stages): no spills, one more
    bar.sync than the kernel with its own staging buffers (all consumers,
    after their last wgmma), and the trap for a broken one-unit promise."""
    ring = gc.GemmConfig(64, gc.BF16, True, True, d_colmajor=True, cluster_n=2, epi_ring=True)
    own = replace(ring, epi_ring=False, stages=0)
    r_ring, r_own = compiler.compile_spec(ring.spec, want_ptx=True), compiler.compile_spec(own.spec, want_ptx=True)
    usage = r_ring.resources
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage
    assert r_ring.ptx.count("bar.sync") == r_own.ptx.count("bar.sync") + 1
    assert "trap;" in r_ring.ptx and "trap;" not in r_own.ptx
