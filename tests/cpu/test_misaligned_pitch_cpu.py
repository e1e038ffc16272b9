"""CPU: the misaligned-pitch rule (configs.misaligned_pitch_config).

An operand whose pitch (bytes between the lines TMA loads) is an odd multiple
of 16 bytes makes every other 128-byte box line start inside a 32-byte L2
sector; such problems run 128x256 tiles in 2x1 clusters (B shared by
multicast), which ask L2 for half the lines per FLOP.  Checked here: which
pitches count as misaligned, that the automatic plan takes the rule for every
input kind and layout whose pitch is misaligned (and only then), that the
pitch is the array's real stride (a padded view decides, not K), and where the
rule stays out: forced options, block-scaled fp8, swap-AB, batches, one tile
row, the long-K cluster rule's problems.
"""
from dataclasses import replace

import pytest

from rawcoop.plan import configs as gc

from helpers.stub import BF16, E4M3, StubArray, auto_cluster, build, stub_planning, tn


@pytest.fixture(autouse=True)
def _wide_pairs(monkeypatch):
    """These tests judge the rule's 128x256 / 192x192 / 128x192 branches: the narrow-width pairs that
    replace some of them (misaligned_narrow_width) are off here and tested in test_misaligned_narrow.py; so
    is the short-K yield to 192x128 plans (MISALIGNED_SHORT_K_TALL_K_BLOCKS), tested at the end of this file,
    and the 1x2 orientation of the pairs (MISALIGNED_PAIR_1X2_RATIO), tested at the end too."""
    monkeypatch.setattr(gc, "MISALIGNED_NARROW_RATIO", 0.0)
    monkeypatch.setattr(gc, "MISALIGNED_SHORT_K_TALL_K_BLOCKS", {})
    monkeypatch.setattr(gc, "MISALIGNED_PAIR_1X2_RATIO", 0.0)


SHORT_K_BLOCKS = dict(gc.MISALIGNED_SHORT_K_TALL_K_BLOCKS)     # the shipped ceilings (the fixture clears them)
PAIR_1X2_RATIO = gc.MISALIGNED_PAIR_1X2_RATIO                  # likewise


def _plan(m, n, k, kind=gc.BF16, kmajor=(True, True), batch=1, **kw):
    """test_cluster_cpu's automatic plan (plain epilogue, 132 SMs) for ``kind`` x ``kind`` inputs."""
    return auto_cluster(m, n, k, batch, kinds=(kind, kind), kmajor=kmajor,
                         out_name={gc.TF32: "float32"}.get(kind, "bfloat16"), **kw)


def _is_rule(cfg, cluster=(2, 1)):
    """The rule's 128x256 pairs: 2x1 clusters, or ``cluster`` (1, 2) (misaligned_pair_1x2)."""
    return (cfg.block_n == 256 and cfg.cluster == cluster and cfg.block_m == 128 and not cfg.pingpong
            and not cfg.stream_k and not cfg.d_colmajor)


@pytest.mark.parametrize("pitch,misaligned", [(16, True), (48, True), (2800, True), (1968, True), (32, False),
                                              (64, False), (2816, False), (2784, False), (96, False), (80, True)])
def test_misaligned_pitch(pitch, misaligned):
    assert gc.misaligned_pitch(pitch) is misaligned


def test_contiguous_pitches():
    assert gc.contiguous_pitches(100, 200, 300, (gc.BF16, gc.BF16), (True, True)) == (600, 600)
    assert gc.contiguous_pitches(100, 200, 300, (gc.BF16, gc.BF16), (False, False)) == (200, 400)
    assert gc.contiguous_pitches(100, 200, 300, (gc.TF32, gc.TF32), (True, True)) == (1200, 1200)
    assert gc.contiguous_pitches(100, 200, 300, (gc.E4M3, gc.E5M2), (True, True)) == (300, 300)


# K of each kind whose K-major rows are misaligned (16 mod 32 bytes), and the aligned K next to it
KS = {gc.BF16: (1400, 1408), gc.FP16: (984, 992), gc.TF32: (1404, 1408), gc.E4M3: (1168, 1184), gc.E5M2: (2480, 2496)}


@pytest.mark.parametrize("kind", sorted(KS))
@pytest.mark.parametrize("m,n", [(5416, 6280), (3208, 2280), (400, 5560), (11656, 1144), (4744, 568)])
def test_rule_takes_misaligned_k_major_rows(kind, m, n):
    bad, good = KS[kind]
    assert _is_rule(_plan(m, n, bad, kind)), (m, n, bad)
    assert not _is_rule(_plan(m, n, good, kind)), (m, n, good)


@pytest.mark.parametrize("kind", [gc.BF16, gc.FP16])
def test_rule_in_mn_major_layouts(kind):
    """MN-major operands: a's pitch is M, b's is N (bytes: x 2)."""
    assert _is_rule(_plan(3000, 7272, 1024, kind, kmajor=(False, True)))      # NN-style a: M = 3000 -> 6000 B
    assert not _is_rule(_plan(3008, 7272, 1024, kind, kmajor=(False, True)))  # 6016 B: aligned
    assert _is_rule(_plan(3008, 7272, 1024, kind, kmajor=(True, False)))      # b row-major: N = 7272 -> 14544 B
    assert not _is_rule(_plan(3008, 7296, 1024, kind, kmajor=(True, False)))
    assert _is_rule(_plan(3000, 7296, 1024, kind, kmajor=(False, False)))     # either operand suffices


def test_rule_follows_the_real_pitch(monkeypatch):
    """gemm passes the arrays' own strides: a K that is aligned in a view with a misaligned pitch takes
    the rule, and a misaligned K padded to an aligned pitch does not."""
    stub_planning(monkeypatch, 66)
    m, n = 4208, 3808
    a, b = tn(m, n, 1024, BF16)
    assert not _is_rule(build(a, b).cfg)
    a_pad = StubArray((m, 1024), BF16, strides=(1032 * 2, 2))         # pitch 2064 B = 16 mod 32
    assert _is_rule(build(a_pad, b).cfg)
    a, b = tn(m, n, 984, BF16)
    assert _is_rule(build(a, b).cfg)
    a_al = StubArray((m, 984), BF16, strides=(1000 * 2, 2))           # 2000 B: still 16 mod 32
    b_al = StubArray((984, n), BF16, strides=(2, 1024 * 2))          # b = bt.T with bt pitch 2048 B
    assert _is_rule(build(a_al, b_al).cfg)
    a_al = StubArray((m, 984), BF16, strides=(1008 * 2, 2))           # 2016 B: aligned
    assert not _is_rule(build(a_al, b_al).cfg)


def test_rule_for_fp8_through_gemm(monkeypatch):
    stub_planning(monkeypatch, 66)
    a, b = tn(4792, 5520, 1168, E4M3)
    assert _is_rule(build(a, b, scale_a=1.0, scale_b=1.0).cfg)
    a, b = tn(4792, 5520, 1152, E4M3)
    assert not _is_rule(build(a, b, scale_a=1.0, scale_b=1.0).cfg)


@pytest.mark.parametrize("why,kw", [
    ("forced tile", dict(block_n=128)), ("forced cluster", dict(cluster=(1, 2))), ("forced split", dict(splits=2)),
    ("forced ping-pong", dict(pingpong=True)), ("forced stream-K", dict(streamk=True)),
    ("forced tall tile", dict(block_m=192)), ("block-scaled", dict(block=True)),
])
def test_rule_stays_out_where_forced_or_block_scaled(why, kw):
    kind = gc.E4M3 if kw.get("block") else gc.BF16
    k = 1168 if kind == gc.E4M3 else 1400
    cfg = _plan(5416, 6280, k, kind, **kw)
    assert not (cfg.block_n == 256 and cfg.cluster == (2, 1)), why


def test_rule_stays_out_of_small_m_batches_one_tile_row_and_narrow_n():
    assert _plan(32, 6280, 1400).d_colmajor                      # swap-AB for small M
    assert not _is_rule(_plan(128, 6280, 1400))                  # one tile row
    assert not _is_rule(_plan(2048, 2048, 1400, batch=4))        # batched
    assert _is_rule(_plan(129, 16384, 1400))                     # two tile rows: 2x1 pairs (128 tiles)
    assert not _is_rule(_plan(5000, 8, 1400))                    # narrow N: 128x64 tiles stay
    assert not _is_rule(_plan(5000, 500, 1400))                  # under MISALIGNED_PITCH_MIN_N
    assert _is_rule(_plan(5000, gc.MISALIGNED_PITCH_MIN_N, 1400))


def test_long_k_cluster_rule_keeps_its_clusters():
    """Where choose_cluster already picks 1x2 for one-round long-K split-K, that choice stands."""
    cfg = _plan(1000, 500, 40000, kmajor=(False, True))           # a's pitch 2000 B: misaligned
    assert cfg.cluster == (1, 2) and cfg.block_n == 128


def test_rule_switch():
    """MISALIGNED_PITCH_KINDS = () is the rule's off switch."""
    saved = gc.MISALIGNED_PITCH_KINDS
    try:
        gc.MISALIGNED_PITCH_KINDS = ()
        assert not _is_rule(_plan(5416, 6280, 1400))
    finally:
        gc.MISALIGNED_PITCH_KINDS = saved
    assert _is_rule(_plan(5416, 6280, 1400))


def _is_tall(cfg):
    return (cfg.block_m == gc.TALL_BLOCK_M and cfg.block_n == 192 and cfg.cluster == (1, 1) and not cfg.stream_k
            and not cfg.pingpong and not cfg.d_colmajor)


# (kind, layout kmajor, M, N, K) whose 128x256 pairs quantise into a partly empty last round (measured)
TALL = [(gc.FP16, (True, True), 552, 7768, 648), (gc.FP16, (True, True), 544, 3464, 4760),
        (gc.FP16, (True, True), 7712, 1064, 856), (gc.BF16, (False, True), 544, 3552, 6472),
        (gc.FP16, (False, False), 864, 4888, 1184), (gc.E4M3, (True, True), 2272, 1808, 1744),
        (gc.TF32, (True, True), 7536, 552, 2516)]


@pytest.mark.parametrize("kind,kmajor,m,n,k", TALL, ids=str)
def test_misaligned_tall_where_192_tiles_fill_the_rounds(kind, kmajor, m, n, k):
    """misaligned_tall_fits: 192x192 tiles, no cluster, when the model gives them <= 0.9 of the
    rule's 128x256 time; the off switch (MISALIGNED_TALL_RATIO = 0) gives the rule back."""
    bk = gc.block_k_of(kind)
    wide = gc.schedule_cost(m, n, k, 132, 128, 256, block_k=bk)
    tall = gc.schedule_cost(m, n, k, 132, gc.TALL_BLOCK_M, 192, block_k=bk)
    assert tall <= gc.MISALIGNED_TALL_RATIO * wide
    cfg = _plan(m, n, k, kind, kmajor=kmajor)
    assert _is_tall(cfg), cfg
    assert cfg == _plan(m, n, k, kind, kmajor=kmajor, block_m=gc.TALL_BLOCK_M)   # the forced 192x192 kernel
    saved = gc.MISALIGNED_TALL_RATIO, gc.MISALIGNED_TALL_RATIO_MN_MAJOR
    try:
        gc.MISALIGNED_TALL_RATIO = gc.MISALIGNED_TALL_RATIO_MN_MAJOR = 0
        assert _is_rule(_plan(m, n, k, kind, kmajor=kmajor))
    finally:
        gc.MISALIGNED_TALL_RATIO, gc.MISALIGNED_TALL_RATIO_MN_MAJOR = saved


@pytest.mark.parametrize("m,n,k", [(760, 9104, 1176), (2336, 2536, 1816), (400, 5560, 3448), (3096, 1960, 4664),
                                   (5416, 6280, 1400)], ids=str)
def test_misaligned_keeps_the_wide_pairs_elsewhere(m, n, k):
    """Model ratio > 0.9 (0.948 - 1.26 here: 192x192 measured 2% - 19% slower on these), or M < TALL_MIN_M
    (400: three 192-row tiles would pad M by 44%), keeps 128x256 in 2x1 clusters."""
    assert not gc.misaligned_tall_fits(m, n, k, 132)
    assert _is_rule(_plan(m, n, k, gc.FP16))


def test_misaligned_tall_needs_tall_min_m():
    assert gc.misaligned_tall_fits(552, 7768, 648, 132)
    assert not gc.misaligned_tall_fits(gc.TALL_MIN_M - 8, 7768, 648, 132)


def test_min_fill_leaves_small_problems_to_the_other_rules(monkeypatch):
    """MISALIGNED_PITCH_MIN_FILL: the rule only where the 128x256 tiles outnumber that share of the SMs
    (a few tiles do not saturate L2, the rule's premise); 0 takes any count."""
    small, large = (768, 1280, 1032), (5120, 4096, 1032)          # 6 x 5 and 40 x 16 tiles of 128x256
    monkeypatch.setattr(gc, "MISALIGNED_PITCH_MIN_FILL", 0.0)
    assert _is_rule(_plan(*small)) and _is_rule(_plan(*large))
    monkeypatch.setattr(gc, "MISALIGNED_PITCH_MIN_FILL", 0.5)
    assert not _is_rule(_plan(*small)) and _is_rule(_plan(*large))
    assert _is_rule(_plan(17 * 128, 4 * 256, 1032))                   # 68 tiles > 66
    assert not _is_rule(_plan(16 * 128, 4 * 256, 1032))               # 64 tiles


def _tall_ratio(m, n, k):
    return (gc.schedule_cost(m, n, k, 132, gc.TALL_BLOCK_M, 192)
            / gc.schedule_cost(m, n, k, 132, 128, 256))


def test_tall_ratio_of_mn_major_layouts(monkeypatch):
    """MISALIGNED_TALL_RATIO_MN_MAJOR decides 192x192 where an operand is MN-major, MISALIGNED_TALL_RATIO
    where both are K-major.  M = 8 mod 16 and K = 8 mod 16 make the pitches misaligned in TN and NN."""
    m, n, k = 3096, 1960, 4664                    # model ratio 0.948
    assert 0.9 < _tall_ratio(m, n, k) <= 1.0
    monkeypatch.setattr(gc, "MISALIGNED_PITCH_MIN_FILL", 0.0)
    monkeypatch.setattr(gc, "MISALIGNED_TALL_RATIO", 0.9)
    monkeypatch.setattr(gc, "MISALIGNED_TALL_RATIO_MN_MAJOR", 0.9)
    assert _is_rule(_plan(m, n, k, kmajor=(True, True))) and _is_rule(_plan(m, n, k, kmajor=(False, True)))
    monkeypatch.setattr(gc, "MISALIGNED_TALL_RATIO_MN_MAJOR", 1.0)
    assert _is_rule(_plan(m, n, k, kmajor=(True, True)))
    assert _is_tall(_plan(m, n, k, kmajor=(False, True)))


def _is_rule_192(cfg):
    return (cfg.block_m == 128 and cfg.block_n == 192 and cfg.cluster == (2, 1) and not cfg.stream_k
            and not cfg.pingpong and not cfg.d_colmajor)


@pytest.mark.parametrize("kmajor", [(True, True), (False, True)], ids=["TN", "NN"])
def test_width_192_pairs_where_they_pad_n_less(monkeypatch, kmajor):
    """MISALIGNED_WIDTH_192_RATIO: 128x192 tiles in 2x1 clusters instead of the rule's 128x256 where
    192-wide columns pad N by more than 2% of N less and the model has them no longer; K-major B only
    (a pair of N-major 192-wide B tiles cannot split three 64-column atoms)."""
    monkeypatch.setattr(gc, "MISALIGNED_PITCH_MIN_FILL", 0.0)
    monkeypatch.setattr(gc, "MISALIGNED_TALL_RATIO", 0.0)
    monkeypatch.setattr(gc, "MISALIGNED_TALL_RATIO_MN_MAJOR", 0.0)
    monkeypatch.setattr(gc, "MISALIGNED_WIDTH_192_RATIO", 0.0)
    monkeypatch.setattr(gc, "MISALIGNED_WIDTH_192_MIN_K", 0)
    m, n, k = 4808, 1912, 1656                    # N: 2048 vs 1920 padded
    assert _is_rule(_plan(m, n, k, kmajor=kmajor))
    monkeypatch.setattr(gc, "MISALIGNED_WIDTH_192_RATIO", 1.0)
    monkeypatch.setattr(gc, "MISALIGNED_WIDTH_192_MIN_K", 2048)
    assert _is_rule(_plan(m, n, k, kmajor=kmajor))                               # under the K floor
    assert _is_rule_192(_plan(m, n, 2056, kmajor=kmajor))                        # from it
    monkeypatch.setattr(gc, "MISALIGNED_WIDTH_192_MIN_K", 0)
    cfg = _plan(m, n, k, kmajor=kmajor)
    assert _is_rule_192(cfg), cfg
    assert cfg == _plan(m, n, k, kmajor=kmajor, block_n=192, cluster=(2, 1))     # the forced kernel
    assert _is_rule(_plan(m, n, k, kmajor=(kmajor[0], False)))                   # N-major B keeps 128x256
    assert _is_rule(_plan(m, 2040, k, kmajor=kmajor))                            # 2048 vs 2112: no gain


# out-of-sample rows measured faster (two random draws: the rule's 128x256 2x1 pair -> 192x128)
SHORT_K_TALL_ROWS = [
    (gc.BF16, "TT", (2400, 856, 432)),      # +26.7%
    (gc.FP16, "NT", (4568, 1008, 320)),     # +18.6%
    (gc.BF16, "TN", (4216, 600, 296)),      # +14.7%
    (gc.FP16, "NN", (424, 9840, 512)),      # +17.3%
    (gc.FP16, "NT", (2464, 984, 880)),      # +23.3%
    (gc.FP16, "TN", (864, 5080, 952)),      # +4.1%
]


@pytest.mark.parametrize("kind,layout,shape", SHORT_K_TALL_ROWS, ids=str)
def test_short_k_yields_to_192x128(kind, layout, shape, monkeypatch):
    """MISALIGNED_SHORT_K_TALL_K_BLOCKS (16 for 16-bit inputs): below K = 1024, a 16-bit
    misaligned-pitch problem whose plan without the rule is 192x128 runs that plan; without the ceilings the
    rule's 128x256 pair comes back."""
    monkeypatch.setattr(gc, "MISALIGNED_SHORT_K_TALL_K_BLOCKS", SHORT_K_BLOCKS)
    m, n, k = shape
    km = gc.LAYOUTS[layout]
    assert gc.misaligned_pitch_config(m, n, 1, 132, kinds=(kind, kind), swap=False, block=False,
                                      pitches=gc.contiguous_pitches(m, n, k, (kind, kind), km))
    cfg = _plan(m, n, k, kind, kmajor=km)
    assert (cfg.block_m, cfg.block_n, cfg.cluster) == (192, 128, (1, 1)) and not cfg.d_colmajor, cfg
    plain = gc.plan_config(m, n, k, 1, 132, kinds=(kind, kind), kmajor=km, out_name="bfloat16", use_c=False,
                           c_rowmajor=True, bias_kind=0, activation=None, block=False, misaligned_rule=False)
    assert plain == cfg
    monkeypatch.setattr(gc, "MISALIGNED_SHORT_K_TALL_K_BLOCKS", {})
    assert _is_rule(_plan(m, n, k, kind, kmajor=km))


@pytest.mark.parametrize("kind,layout,shape", [
    (gc.E4M3, "TN", (2440, 2520, 2992)),    # seed 389 (e4m3 16-31 k-blocks): 192x128 -6%, the rule stays
    (gc.E4M3, "TN", (416, 4800, 3312)),     # ... -13.5%
    (gc.BF16, "TT", (984, 2568, 1864)),     # seed 382 (K 1024-2048): 192x128 -16%, the rule stays
    (gc.BF16, "NN", (5096, 784, 2032)),     # ... -15%
    (gc.BF16, "NT", (2904, 10232, 432)),    # short K, but the plan without the rule is 128x128 ping-pong
], ids=str)
def test_short_k_yield_stays_out(kind, layout, shape, monkeypatch):
    """Not from 16 k-blocks of K on (16-bit K >= 1024, seed 382: 8 of 16, +0.1%; e4m3 K >= 2048, seed 389: 2
    of 16, -3.3%) nor where the plan without the rule is not 192x128 (the stored oracle rows: 128x128
    ping-pong fallbacks lost on most)."""
    monkeypatch.setattr(gc, "MISALIGNED_SHORT_K_TALL_K_BLOCKS", SHORT_K_BLOCKS)
    cfg = _plan(*shape, kind, kmajor=gc.LAYOUTS[layout])
    assert (cfg.block_m, cfg.block_n) != (192, 128), cfg


def test_short_k_yield_takes_fp8_and_tf32(monkeypatch):
    """Every input kind yields, at 16 k-blocks each (e4m3 measured: 49 of 64 faster over four
    draws below K = 1024, 24 of 32 at K 1024-2047; tf32 28 of 32 below K = 512; e5m2 and the mixed kinds run
    the same kernels as e4m3); without their entries fp8 and tf32 keep the rule's pairs."""
    monkeypatch.setattr(gc, "MISALIGNED_SHORT_K_TALL_K_BLOCKS", SHORT_K_BLOCKS)
    assert set(SHORT_K_BLOCKS.values()) == {16}
    m, n, km = 2400, 856, (True, True)
    for kinds, k, longer in (((gc.TF32, gc.TF32), 428, 516), ((gc.E4M3, gc.E4M3), 848, 2064),
                             ((gc.E5M2, gc.E5M2), 1872, 2064), ((gc.E4M3, gc.E5M2), 848, 2064)):
        out = "float32" if kinds[0] == gc.TF32 else "bfloat16"
        args = dict(kinds=kinds, kmajor=km, out_name=out, use_c=False, c_rowmajor=True, bias_kind=0,
                    activation=None, block=False)
        plain = gc.plan_config(m, n, k, 1, 132, misaligned_rule=False, **args)
        assert (plain.block_m, plain.block_n) == (192, 128), plain
        assert gc.misaligned_short_k_tall(k, kinds) and not gc.misaligned_short_k_tall(longer, kinds)
        assert gc.plan_config(m, n, k, 1, 132, **args) == plain
    monkeypatch.setattr(gc, "MISALIGNED_SHORT_K_TALL_K_BLOCKS", {gc.FP16: 16, gc.BF16: 16})     # 16-bit kinds only
    assert _is_rule(_plan(m, n, 848, gc.E4M3, kmajor=km))
    assert _is_rule(_plan(m, n, 428, gc.TF32, kmajor=km))


# out-of-sample e4m3 rows measured faster (two random draws below K = 1024, two at 8-15 k-blocks):
# the rule's 128x256 2x1 pair -> 192x128
@pytest.mark.parametrize("shape", [(2328, 904, 688), (2456, 2440, 496), (888, 2928, 688), (3520, 1240, 400),
                                   (2824, 672, 1040), (768, 3032, 1904), (2880, 888, 1744)], ids=str)
def test_short_k_yield_e4m3_rows(shape, monkeypatch):
    monkeypatch.setattr(gc, "MISALIGNED_SHORT_K_TALL_K_BLOCKS", SHORT_K_BLOCKS)
    m, n, k = shape
    cfg = _plan(m, n, k, gc.E4M3, kmajor=(True, True))
    assert (cfg.block_m, cfg.block_n, cfg.cluster) == (192, 128, (1, 1)) and not cfg.d_colmajor, cfg
    monkeypatch.setattr(gc, "MISALIGNED_SHORT_K_TALL_K_BLOCKS", {gc.FP16: 16, gc.BF16: 16})
    assert _is_rule(_plan(m, n, k, gc.E4M3, kmajor=(True, True)))


# --- the pairs' orientation (MISALIGNED_PAIR_1X2_RATIO) -----------------------------------------------------

def test_pair_rounds_of_either_orientation():
    # 5 tile rows x 24 columns of 128x256: 2x1 pairs 3 x 24 = 72 (one pair row half empty) on 66 slots,
    # 1x2 pairs 5 x 12 = 60, one round
    m, n, k = 616, 24 * 256, 4096
    assert gc.pair_rounds(m, n, k, 132, 256) > 1
    assert gc.pair_rounds(m, n, k, 132, 256, cluster=(1, 2)) == pytest.approx(1.0)
    assert gc.pair_rounds(m, n, k, 132, 256, cluster=(2, 1)) == gc.pair_rounds(m, n, k, 132, 256)
    # an even tile-row count and an odd tile-column count: the other way round
    assert gc.pair_rounds(4 * 128, 33 * 256, k, 132, 256) == pytest.approx(1.0)
    assert gc.pair_rounds(4 * 128, 33 * 256, k, 132, 256, cluster=(1, 2)) > 1


# The stored oracle rows the rule was fitted on (in sample: all 8 rows with the ratio <= 0.9 ran 1x2 faster),
# the plans of the full rule set
PAIR_1X2_ROWS = [(gc.FP16, "NT", (2368, 10024, 504)), (gc.FP16, "TT", (1624, 7496, 8640)),
                 (gc.BF16, "TT", (6200, 840, 8200)), (gc.BF16, "NN", (6016, 3568, 1704)),
                 (gc.FP16, "NN", (3352, 11056, 432)), (gc.BF16, "NT", (2904, 10232, 432)),
                 (gc.BF16, "NN", (1368, 5848, 9520)), (gc.FP16, "TN", (1896, 10768, 712))]


@pytest.mark.parametrize("kind,layout,shape", PAIR_1X2_ROWS, ids=str)
def test_pairs_run_1x2_where_that_takes_fewer_rounds(kind, layout, shape, monkeypatch):
    m, n, k = shape
    monkeypatch.undo()                         # the shipped rules (the fixture's switches), narrow widths included
    assert gc.MISALIGNED_PAIR_1X2_RATIO == PAIR_1X2_RATIO
    cfg = _plan(m, n, k, kind, kmajor=gc.LAYOUTS[layout])
    assert _is_rule(cfg, (1, 2)), cfg
    assert gc.misaligned_pair_1x2(replace(cfg, cluster_m=2, cluster_n=1), m, n, k, 132)
    monkeypatch.setattr(gc, "MISALIGNED_PAIR_1X2_RATIO", 0.0)          # off: the 2x1 pairs of the same tile
    off = _plan(m, n, k, kind, kmajor=gc.LAYOUTS[layout])
    assert _is_rule(off)


@pytest.mark.parametrize("kind,layout,shape", [
    (gc.BF16, "TN", (5416, 6280, 1400)),      # 43 x 25 tiles: both counts odd, 550 vs 559 pairs
    (gc.BF16, "NN", (3000, 7272, 824)),       # 24 tile rows: whole 2x1 pairs
    (gc.FP16, "TT", (1000, 11256, 1744)),     # 8 tile rows
    (gc.BF16, "TN", (4360, 512, 5016))], ids=str)
def test_pairs_stay_2x1_without_fewer_rounds(kind, layout, shape, monkeypatch):
    monkeypatch.setattr(gc, "MISALIGNED_PAIR_1X2_RATIO", PAIR_1X2_RATIO)
    m, n, k = shape
    cfg = _plan(m, n, k, kind, kmajor=gc.LAYOUTS[layout])
    assert _is_rule(cfg), cfg


def test_1x2_pairs_only_from_256_wide_2x1_pairs(monkeypatch):
    monkeypatch.setattr(gc, "MISALIGNED_PAIR_1X2_RATIO", PAIR_1X2_RATIO)
    m, n, k = 616, 24 * 256, 4096
    pair = gc.GemmConfig(256, True, True, True, cluster_m=2)
    assert gc.misaligned_pair_1x2(pair, m, n, k, 132)
    assert not gc.misaligned_pair_1x2(gc.GemmConfig(256, True, True, True), m, n, k, 132)        # no cluster
    assert not gc.misaligned_pair_1x2(gc.GemmConfig(192, True, True, True, cluster_m=2), m, 24 * 192, k, 132)
    assert not gc.misaligned_pair_1x2(gc.GemmConfig(256, True, True, True, cluster_n=2), m, n, k, 132)
    monkeypatch.setattr(gc, "MISALIGNED_PAIR_1X2_RATIO", 0.0)
    assert not gc.misaligned_pair_1x2(pair, m, n, k, 132)


def test_warmup_compiles_the_1x2_pairs():
    """Warm-up holds the 1x2 pair kernels as it holds the 2x1 ones: every 16-bit layout by default
    (all_specs), every tf32 / fp8 kind pair with ``--all``."""
    specs, everything = set(gc.all_specs()), set(gc.all_specs(everything=True))
    for bf in (True, False):
        for km in gc.LAYOUTS.values():
            assert gc.GemmConfig(256, bf, *km, cluster_n=2).spec in specs
            assert gc.GemmConfig(256, bf, *km, cluster_m=2).spec in specs
    for ka, kb in gc.LOWP_KIND_PAIRS:
        assert gc.GemmConfig(256, ka, b_kind=kb, cluster_m=2).spec in everything
        if ka in gc.MISALIGNED_PAIR_1X2_KINDS:
            assert gc.GemmConfig(256, ka, b_kind=kb, cluster_n=2).spec in everything


def test_1x2_pairs_for_fp8_not_tf32(monkeypatch):
    """MISALIGNED_PAIR_1X2_KINDS: e4m3 (8 of 12 faster, +6%), e5m2 and mixed fp8 take the 1x2
    pairs; tf32 (5 of 8, +4.8%: under the A/B's bar) keeps the 2x1 ones."""
    monkeypatch.setattr(gc, "MISALIGNED_PAIR_1X2_RATIO", PAIR_1X2_RATIO)
    km = (True, True)
    for kinds, (m, n, k) in (((gc.E4M3, gc.E4M3), (264, 9480, 528)), ((gc.E5M2, gc.E5M2), (360, 9184, 6960)),
                             ((gc.E4M3, gc.E5M2), (280, 9472, 8144))):
        assert _is_rule(auto_cluster(m, n, k, kinds=kinds, kmajor=km), (1, 2)), kinds
    tf32 = _plan(600, 12020, 388, gc.TF32, kmajor=km)          # seed 394's +24% row: 2x1 all the same
    assert _is_rule(tf32)
    monkeypatch.setattr(gc, "MISALIGNED_PAIR_1X2_KINDS", (gc.FP16, gc.BF16, gc.E4M3, gc.E5M2, gc.TF32))
    assert _is_rule(_plan(600, 12020, 388, gc.TF32, kmajor=km), (1, 2))
