"""Stream-K decomposition (opt-in ``_streamk=True``), host side: the pieces
cover every (tile, k-block) once, shares are equal, the serial fix-up's wait
order cannot deadlock, and the integer formulas the kernel shares with
rawcoop/scheduler.py match a brute-force construction.  CPU only."""
from __future__ import annotations

import random

import pytest

from rawcoop.plan import scheduler
from rawcoop.plan.scheduler import Decomposition, decompose, decompose_stream_k

from helpers.stub import StubArray, build, stub_planning, tn   # noqa: F401


def _cases(n, seed):
    rng = random.Random(seed)
    for _ in range(n):
        sms = rng.choice((132, 114, 8, 5, 3))
        tiles = rng.randint(1, 5 * sms)
        k_blocks = rng.choice((1, 2, 3, 7, 16, 64, 100, 1024))
        yield tiles, k_blocks, sms


def _pieces_by_brute_force(dec):
    """(cta, tile) -> (first k-block, count) from the explicit global sequence."""
    sk_tiles = dec.tiles - dec.tiles_dp
    seq = [(dec.tiles_dp + t, kb) for t in range(sk_tiles) for kb in range(dec.k_blocks)]
    per, rem = divmod(len(seq), dec.sk_ctas)
    out, pos = {}, 0
    for c in range(dec.sk_ctas):
        n = per + (1 if c < rem else 0)
        for tile, kb in seq[pos:pos + n]:
            lo, cnt = out.get((c, tile), (kb, 0))
            out[(c, tile)] = (lo, cnt + 1)
        pos += n
    return out


@pytest.mark.parametrize("seed", range(4))
def test_stream_k_pieces_cover_once_and_match_brute_force(seed):
    checked = 0
    for tiles, k_blocks, sms in _cases(150, seed):
        dec = decompose_stream_k(tiles, k_blocks, sms)
        if not dec.sk_ctas:
            full, tail = divmod(tiles, sms)
            assert tail == 0 or tail * k_blocks < scheduler.MIN_SK_KBLOCKS * sms
            assert dec.tiles_dp == tiles and dec.splits == 1
            continue
        checked += 1
        assert dec.tiles_dp % sms == 0 and dec.tiles_dp == tiles // sms * sms
        assert dec.units == dec.tiles_dp + sms * dec.splits
        brute = _pieces_by_brute_force(dec)
        got, covered = {}, set()
        per_tile = {}
        for u in range(dec.tiles_dp, dec.units):
            tile, split, splits, kb0, kbn = dec.unit(u)
            c = (u - dec.tiles_dp) % sms
            if kbn == 0:
                continue
            got[(c, tile)] = (kb0, kbn)
            for kb in range(kb0, kb0 + kbn):
                assert (tile, kb) not in covered
                covered.add((tile, kb))
            per_tile.setdefault(tile, []).append((kb0, split, splits, c))
        assert got == brute
        assert len(covered) == (tiles - dec.tiles_dp) * k_blocks
        for tile, ps in per_tile.items():
            ps.sort()
            assert [p[1] for p in ps] == list(range(len(ps)))          # split index = K order
            assert {p[2] for p in ps} == {len(ps)}                     # every piece knows the count
            owners = [p[3] for p in ps]
            assert owners == list(range(owners[0], owners[0] + len(ps)))   # consecutive CTAs
        # equal shares: every CTA gets per or per + 1 k-blocks
        shares = [sum(n for (c, _), (_, n) in got.items() if c == cta) for cta in range(sms)]
        assert max(shares) - min(shares) <= 1
    assert checked > 40


def _simulate(dec, sms):
    """All CTAs run at once; a unit with split p > 0 finishes only after its
    tile's split p - 1 has.  Returns True if every CTA gets through its
    sequence (the kernel's serial fix-up cannot deadlock)."""
    queues = []
    for c in range(sms):
        q = []
        for u in range(c, dec.units, sms):
            tile, split, splits, kb0, kbn = dec.unit(u)
            if kbn:
                q.append((tile, split))
        queues.append(q)
    done = set()
    while any(queues):
        progress = False
        for q in queues:
            if q and (q[0][1] == 0 or (q[0][0], q[0][1] - 1) in done):
                done.add(q.pop(0))
                progress = True
        if not progress:
            return False
    return True


def test_stream_k_wait_order_cannot_deadlock():
    # Each CTA's units run in sequence here; the ping-pong consumers only relax that order (a unit's
    # fix-up may finish after the next unit's), so every order this finds is one ping-pong can run too.
    for tiles, k_blocks, sms in _cases(300, 7):
        dec = decompose_stream_k(tiles, k_blocks, sms)
        assert _simulate(dec, sms), (tiles, k_blocks, sms)


def test_stream_k_pieces_are_walked_last_tile_first():
    dec = decompose_stream_k(512, 64, 132)             # 4096^3 with 128x256 tiles: 116 tiles in the last wave
    assert dec.tiles_dp == 396 and dec.sk_ctas == 132
    for c in range(132):
        tiles = [dec.unit(u)[0] for u in range(dec.tiles_dp + c, dec.units, 132) if dec.unit(u)[4]]
        assert tiles == sorted(tiles, reverse=True)
        b, e = dec.sk_range(c)
        assert e - b in (7424 // 132, 7424 // 132 + 1)  # 116 * 64 k-blocks over 132 CTAs: 56 or 57 each


def test_stream_k_falls_back_to_data_parallel():
    assert decompose_stream_k(264, 64, 132) == Decomposition(264, 64, 264, 1)     # whole waves
    assert decompose_stream_k(133, 1, 132) == Decomposition(133, 1, 133, 1)       # shares under 4 k-blocks
    small = decompose_stream_k(64, 128, 132)                                      # fewer tiles than SMs
    assert small.tiles_dp == 0 and small.sk_ctas == 132


def test_stream_k_schedule_and_workspace():
    sched = scheduler.schedule(4096, 4096, 128, 256, 132, k=4096, block_k=64, stream_k=True)
    dec = sched.decomposition
    assert sched.grid == 132 and dec.sk_ctas == 132
    assert dec.split_tiles == 116 and dec.workspace_floats(256) == 116 * 2 * 64 * 256
    seen = set()
    for cta in range(132):
        for (u, l, tm, tn, split, splits, kb0, kbn) in sched.cta_units(cta):
            assert kbn > 0
            for kb in range(kb0, kb0 + kbn):
                assert (l, tm, tn, kb) not in seen
                seen.add((l, tm, tn, kb))
    assert len(seen) == 32 * 16 * 64
    with pytest.raises(ValueError, match="stream-K takes neither"):
        scheduler.schedule(4096, 4096, 128, 256, 66, k=4096, stream_k=True, cluster=(2, 1))
    with pytest.raises(ValueError, match="stream-K takes neither"):
        scheduler.schedule(4096, 4096, 128, 256, 132, k=4096, stream_k=True, splits=2)


def test_stream_k_plan(monkeypatch):
    """gemm's planning with _streamk=True: the STREAM_K kernel, its splits
    argument = the most pieces per CTA, a workspace for the stream-K tiles;
    the combinations it excludes raise before anything is launched."""
    stub_planning(monkeypatch)
    a, b = tn(4096, 4096, 4096, "bfloat16")
    plan = build(a, b, _streamk=True)
    assert ("STREAM_K", 1) in plan.cfg.spec.defines and plan.cfg.block_n == 256 and not plan.cfg.pingpong
    dec = plan.decomposition
    assert dec.sk_ctas == 132 and plan.scalars[-2:] == (dec.tiles_dp, dec.splits)
    assert plan.ws_floats == dec.workspace_floats(256) and plan.ws_flags == dec.flag_count() > 0
    plain = build(a, b)
    assert all(k != "STREAM_K" for k, _ in plain.cfg.spec.defines) and plain.decomposition.sk_ctas == 0
    for kw in (dict(_splits=2), dict(_cluster=2), dict(_cluster=(1, 2))):
        with pytest.raises(ValueError, match="_streamk=True"):
            build(a, b, _block_n=128, _streamk=True, **kw)


def test_pingpong_stream_k_plan(monkeypatch):
    """_pingpong=True with _streamk=True (opt-in): the PINGPONG and
    STREAM_K kernel, the serial chain (no spread), one workspace slot per
    64-row half of every stream-K tile; not block-scaled (a clear error
    before anything is launched)."""
    stub_planning(monkeypatch)
    a, b = tn(2048, 2624, 2048, "bfloat16")           # 336 tiles of 128x128: 2 full waves + 72
    plan = build(a, b, _pingpong=True, _streamk=True, _block_n=128, _swap=False)
    defines = dict(plan.cfg.spec.defines)
    assert defines["PINGPONG"] == 1 and defines["STREAM_K"] == 1 and plan.cfg.block_n == 128
    dec = plan.decomposition
    assert dec.sk_ctas == 132 and dec.tiles_dp == 264 and plan.scalars[-2:] == (264, dec.splits)
    assert not plan.scalars[7] & 8                     # bmask bit 3 (spread) off: the chain
    assert plan.ws_floats == 72 * 2 * 64 * 128 and plan.ws_flags == 72 * 2
    # (block-scaled: tests/cpu/test_block_scaled_host.py)


def test_stream_k_empty_units_come_last():
    """A ping-pong consumer waits for the other consumer's hand-over (turn)
    from the previous unit of the CTA's sequence; an empty stream-K unit
    hands nothing over.  Empty units are always the last of a CTA's
    sequence, so no consumer waits after one (kernels/gemm.cu)."""
    for tiles, k_blocks, sms in _cases(300, 11):
        dec = decompose_stream_k(tiles, k_blocks, sms)
        for c in range(sms):
            counts = [dec.unit(u)[4] for u in range(c, dec.units, sms)]
            first_empty = next((i for i, n in enumerate(counts) if n == 0), len(counts))
            assert all(n == 0 for n in counts[first_empty:]), (tiles, k_blocks, sms, c, counts)


def _device_work_unit(u, dec, ctas):
    """A line-by-line transliteration of kernels/scheduler.cuh's stream-K
    branch (unsigned 32-bit arithmetic, the first/last shortcuts), to check
    that the kernel's formulas and the host mirror agree."""
    m32 = 0xFFFFFFFF
    v, kbs = (u - dec.tiles_dp) & m32, dec.k_blocks
    q = v // ctas
    c = (v - q * ctas) & m32
    total = ((dec.tiles - dec.tiles_dp) * kbs) & m32
    per = total // ctas
    rem = (total - per * ctas) & m32
    begin = c * per + (c if c < rem else rem)
    end = begin + per + (1 if c < rem else 0)

    def owner(x):
        big = rem * (per + 1)
        return x // (per + 1) if x < big else rem + (x - big) // per

    if begin < end and q <= (end - 1) // kbs - begin // kbs:
        t = (end - 1) // kbs - q
        t0 = t * kbs
        lo, hi = max(begin, t0), min(end, t0 + kbs)
        first = c if lo == t0 else owner(t0)
        last = c if hi == t0 + kbs else owner(t0 + kbs - 1)
        return dec.tiles_dp + t, c - first, last - first + 1, lo - t0, hi - lo
    return dec.tiles_dp, 0, 1, 0, 0


def test_stream_k_device_formulas_match_the_host_mirror():
    for tiles, k_blocks, sms in _cases(200, 3):
        dec = decompose_stream_k(tiles, k_blocks, sms)
        if not dec.sk_ctas:
            continue
        for u in range(dec.tiles_dp, dec.units):
            assert _device_work_unit(u, dec, sms) == dec.unit(u), (tiles, k_blocks, sms, u)


def test_capture_fallback_runs_the_data_parallel_plan_only_for_automatic_choices():
    """gemm._run_plan: a plan whose workspace cannot be created under capture
    is replaced by the data-parallel plan when no `_` option was forced; a
    forced split-K/stream-K keeps raising."""
    import importlib
    G = importlib.import_module("rawcoop.gemm")      # (rawcoop.gemm the attribute is the function)
    from rawcoop.workspace import CaptureWorkspaceError

    class Plan:
        def __init__(self, fail):
            self.fail, self.ran = fail, 0

        def run(self, cp, out):
            self.ran += 1
            if self.fail:
                raise CaptureWorkspaceError("before begin_capture")
            return "ran"
    dp = Plan(False)
    built = []

    def data_parallel():
        built.append(1)
        return dp
    none = (None,) * len(G.FORCED_OPTIONS)
    assert G._run_plan(None, Plan(False), None, none, data_parallel) == "ran" and not built
    assert G._run_plan(None, Plan(True), None, none, data_parallel) == "ran" and built and dp.ran == 1
    forced = tuple(2 if name == "_splits" else None for name in G.FORCED_OPTIONS)
    with pytest.raises(RuntimeError, match="before begin_capture"):
        G._run_plan(None, Plan(True), None, forced, data_parallel)
    assert issubclass(CaptureWorkspaceError, RuntimeError)


def test_spread_split_k_rule():
    """The spread split-K reduction (kernels/gemm.cu SPLIT_SPREAD): only split-K
    (never stream-K) whose tiles have all their splits running at once (split
    units at most one per CTA of the grid, or rounds the splits divide), so
    that every split a unit waits for is running; the workspace then holds a
    slot per split."""
    tail = decompose(64, 1024, 132)                       # 1024^2 x 65536 in 128x128 tiles: 2 splits
    assert tail.splits == 2 and tail.spread(132) and not tail.spread(127)
    assert tail.workspace_floats(128, spread=True) == 2 * tail.workspace_floats(128) == 64 * 2 * 2 * 64 * 128
    wave = decompose(132 + 30, 512, 132)                  # a full wave + 30 tiles in 4 splits (120 units)
    assert wave.tiles_dp == 132 and wave.splits == 4 and wave.spread(132)
    forced = decompose(100, 64, 132, splits=2)            # forced on every tile: 200 units in 2 rounds of 132,
    assert forced.tiles_dp == 0 and forced.spread(132)    # each tile's 2 splits in one round
    assert not decompose(100, 64, 132, splits=5).spread(132)     # 5 does not divide 132: splits straddle rounds
    assert not forced.spread(131)
    assert not decompose(132, 64, 132).spread(132)        # no split tiles
    assert not decompose_stream_k(116 + 132, 64, 132).spread(132)


@pytest.mark.parametrize("seed", range(4))
def test_spread_waits_only_within_a_round(seed):
    """Where the reduction is spread, every split waits for all splits of its
    tile; that cannot deadlock only if those run at once: on distinct CTAs (unit
    u runs on CTA u % grid) in the same round (u // grid), rounds running in
    order.  Brute force over random decompositions, forced and automatic."""
    rng = random.Random(100 + seed)
    seen = 0
    for _ in range(400):
        grid = rng.choice((132, 114, 66, 12, 8, 6))
        tiles = rng.randint(1, 3 * grid)
        k_blocks = rng.choice((16, 64, 256, 1024))
        forced = rng.choice((None, None, 2, 3, 4, 6))
        dec = decompose(tiles, k_blocks, grid, forced)
        g = min(grid, dec.units)
        if not dec.spread(g):
            continue
        seen += 1
        by_tile = {}
        for u in range(dec.tiles_dp, dec.units):
            by_tile.setdefault(dec.unit(u)[0], []).append(u)
        for tile, us in by_tile.items():
            assert len(us) == dec.splits
            assert len({u // g for u in us}) == 1, (dec, g, tile, us)
            assert len({u % g for u in us}) == len(us), (dec, g, tile, us)
    assert seen > 50


def test_one_round_split_k_rule():
    """Without a full wave, split-K takes up to ONE_ROUND_MAX_SPLITS splits (all
    units resident: the spread reduction), FEW_TILES_MAX_SPLITS when that many
    splits of every tile fit on the SMs, each keeping >= ONE_ROUND_MIN_KBLOCKS
    k-blocks; otherwise MAX_SPLITS (after full waves: test_tail_split_rule);
    never several rounds by default."""
    d = decompose(16, 1024, 132)                          # 512x512x65536, 128x128: 8 splits, 128 units
    assert (d.tiles_dp, d.splits, d.units) == (0, 8, 128) and d.spread(132)
    assert decompose(16, 128, 132).splits == 8            # 512x512x8192: 8 splits of 1024
    assert decompose(16, 96, 132).splits == 6             # 96 // 16 k-blocks
    assert decompose(16, 16, 132).splits == 2             # short K: MAX_SPLITS' rule, >= 8 k-blocks per split
    d = decompose(4, 1024, 132)                           # 256x256x65536: 4 tiles, 16 splits of 64 k-blocks
    assert (d.splits, d.units) == (16, 64) and d.spread(132)
    assert decompose(8, 256, 132).splits == 16            # 256x512x16384: 8 tiles x 16 = 128 units
    assert decompose(9, 1024, 132).splits == 8            # 384x384x65536: 16 x 9 > 132, so at most 8 (14 ran -3%)
    assert decompose(8, 200, 132).splits == 12            # 200 // 16
    assert decompose(132 + 16, 1024, 132, chain=True).splits == 4     # after a full wave, chained: MAX_SPLITS
    assert decompose(96, 1024, 132).splits == 1           # 96 tiles: one round of splits cannot fill the SMs
    # schedule(): 16 splits for few tiles of 128 columns or more; 128x64 tiles keep 8 at most
    assert scheduler.schedule(256, 256, 128, 128, 132, k=65536).decomposition.splits == 16
    assert scheduler.schedule(256, 512, 128, 256, 132, k=65536).decomposition.splits == 16
    narrow = scheduler.schedule(1024, 64, 128, 64, 132, k=65536).decomposition    # 64x1024x65536 swapped
    assert (narrow.tiles, narrow.splits) == (8, 8)
    assert scheduler.schedule(1024, 64, 128, 64, 132, k=16384).decomposition.splits == 8     # 256 // 32 (8 tiles)
    assert scheduler.schedule(2048, 32, 128, 64, 132, k=16384).decomposition.splits == 4     # 16 tiles: 256 // 64
    assert scheduler.schedule(1024, 64, 128, 64, 132, k=12288).decomposition.splits == 6     # 192 // 32
    assert decompose(8, 256, 132, narrow=True).splits == 8 and decompose(8, 256, 132).splits == 16
    assert decompose(9, 256, 132, narrow=True).splits == 4                                   # > 8 tiles: >= 64 k-blocks
    for t, kb, sms in _cases(300, 5):
        d = decompose(t, kb, sms)
        assert d.units - d.tiles_dp <= sms or d.splits == 1, d       # one round of split units at most
        if t >= sms:
            assert d.splits == 1 or (d.splits <= scheduler.TAIL_MAX_SPLITS
                                     and kb // d.splits >= scheduler.MIN_KBLOCKS_PER_SPLIT), d
            assert decompose(t, kb, sms, chain=True).splits <= scheduler.MAX_SPLITS
        else:
            assert decompose(t, kb, sms, chain=True) == d                 # one round: spread or not, the same
            cap = (scheduler.FEW_TILES_MAX_SPLITS if t * scheduler.FEW_TILES_MAX_SPLITS <= sms
                   else scheduler.ONE_ROUND_MAX_SPLITS)
            assert d.splits <= cap, d
            if d.splits > scheduler.MAX_SPLITS:
                assert kb // d.splits >= scheduler.ONE_ROUND_MIN_KBLOCKS, d


def test_tail_split_rule():
    """After full waves the partial last wave's tiles split as many ways as
    fill the idle SMs, up to TAIL_MAX_SPLITS when the kernel reduces them
    spread (cooperative: every tail split resident in the last round) and
    MAX_SPLITS when it chains them (ping-pong), >= MIN_KBLOCKS_PER_SPLIT
    k-blocks each.  H200: 16 splits instead of 4 after one wave +9%
    to +11% (bf16 / fp16 / e4m3 / tf32)."""
    d = decompose(138, 128, 132)                          # 2880x1408x8192 on 128x256: 6 tail tiles
    assert (d.tiles_dp, d.splits, d.units) == (132, 16, 132 + 96) and d.spread(132)
    assert decompose(138, 128, 132, chain=True).splits == 4
    assert decompose(140, 160, 132).splits == 16          # 1792x2560x10240: 8 tail tiles, 16 x 8 = 128 units
    assert decompose(141, 176, 132).splits == 14          # 9 tail tiles: 132 // 9
    assert decompose(135, 96, 132).splits == 12           # e4m3 K = 12288 (BLOCK_K 128): 96 // 8 k-blocks
    assert decompose(280, 168, 132).splits == 8           # 16 tail tiles after two waves: 132 // 16
    assert decompose(156, 161, 132).splits == 5           # 24 tail tiles: 132 // 24
    assert decompose(132 + 67, 1024, 132).splits == 1     # more than half a wave: data-parallel
    assert decompose(138, 24, 132).splits == 3            # short K: 24 // 8
    for t in range(133, 400):
        for kb in (16, 64, 128, 512):
            d, c = decompose(t, kb, 132), decompose(t, kb, 132, chain=True)
            assert c.splits == (min(132 // (t % 132), scheduler.MAX_SPLITS, kb // 8) if t % 132 and
                                min(132 // (t % 132), scheduler.MAX_SPLITS, kb // 8) >= 2 else 1)
            assert d.splits >= c.splits and d.units - d.tiles_dp <= 132 and (d.splits == 1 or d.spread(132))
    # the plans: cooperative kernels get the spread tail, ping-pong ones the chain's cap
    assert scheduler.schedule(2880, 1408, 128, 256, 132, k=8192).decomposition.splits == 16
    assert scheduler.schedule(2880, 1408, 128, 256, 132, k=8192, chain=True).decomposition.splits == 4


def test_time_in_rounds():
    assert decompose(96, 1024, 132).time_in_rounds(132) == 1.0
    assert decompose(44, 1024, 132).time_in_rounds(132) == 1 / 3
    assert decompose(132 + 30, 512, 132).time_in_rounds(132) == 1 + 1 / 4
    assert decompose(300, 64, 132).time_in_rounds(132) == 2 + 1 / 3     # 36 tail tiles in 3 splits
    assert decompose(264, 64, 132).time_in_rounds(132) == 2.0


def test_spread_split_k_workspace_in_plans(monkeypatch):
    """gemm sizes the workspace for the reduction its kernel will run: a slot per
    split for cooperative kernels that spread, one slot for ping-pong (chain)."""
    stub_planning(monkeypatch)
    a, b = tn(1024, 1024, 8192, "bfloat16")               # 64 tiles of 128x128, 2 splits: 128 units
    coop = build(a, b, _block_n=128, _pingpong=False, _splits=2)
    pp = build(a, b, _block_n=128, _pingpong=True, _splits=2)
    for plan in (coop, pp):
        assert plan.decomposition.splits == 2 and plan.decomposition.spread(plan.grid[0])
    assert coop.ws_floats == 2 * pp.ws_floats == 2 * coop.decomposition.workspace_floats(128)
    assert coop.ws_flags == pp.ws_flags == coop.decomposition.flag_count()


@pytest.mark.parametrize("mnk", [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (1024, 1024, 65536),
                                 (3456, 4096, 8192), (1792, 3840, 8192), (2048, 2048, 8192), (128, 8192, 8192),
                                 (96, 8192, 8192), (16, 8192, 8192), (16, 4096, 8192), (1, 4096, 4096),
                                 (1408, 1024, 65536), (512, 512, 65536), (3072, 3072, 3072), (3072, 4096, 2048)],
                                ids=str)
@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("b_kmajor", [True, False])
def test_default_16bit_plans_are_warmed_by_default(monkeypatch, mnk, dt, b_kmajor):
    """A plain 16-bit GEMM (no C, bias or activation) runs a kernel that
    `python -m rawcoop warmup` (configs.all_configs) compiles, whatever
    tile, decomposition, ping-pong or swap-AB the rules pick.  (Swap-AB plans
    used to name BIAS_ON_ROWS=1 without a bias: a kernel nothing warmed.)"""
    from helpers.plan import gc as configs
    stub_planning(monkeypatch)
    m, n, k = mnk
    a, b = tn(m, n, k, dt)
    if not b_kmajor:
        b = StubArray((k, n), b.dtype)
    plan = build(a, b)
    assert plan.cfg.spec in set(configs.all_specs()), plan.cfg.spec.label
    kind = configs.IN_KINDS[dt]
    assert configs.config_for_problem(m, n, k, kind, True, b_kmajor) == plan.cfg   # the CLI's prediction


