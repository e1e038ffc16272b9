"""bench/timeline.py's kernel side (CPU): RC_TIMELINE compiles the
%globaltimer stamps and the rc_timeline global into the kernels, without
spills; without it no kernel carries them.  Its option parser."""
import pytest

import helpers
from rawcoop import compiler
from helpers.plan import gc as gc
from rawcoop.compiler import KernelSpec


def _usage(r):
    import re
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.log)
    return int(m.group(1)), int(m.group(2))


@pytest.mark.parametrize("cfg", [gc.GemmConfig(128, True, pingpong=True),
                                 gc.GemmConfig(128, True, pingpong=True, stream_k=True),
                                 gc.GemmConfig(256, False, True, False, 1, True, False, False, 1, False, 2),
                                 gc.GemmConfig(128, gc.E4M3, scale_mode=1)],
                         ids=lambda c: c.spec.label)
def test_timeline_stamps_only_when_defined(cfg):
    spec = cfg.spec
    plain = compiler.compile_spec(spec, want_ptx=True)
    assert "globaltimer" not in plain.ptx and "rc_timeline" not in plain.ptx
    timed = compiler.compile_spec(KernelSpec(spec.source, spec.name, tuple(sorted(spec.defines + (("RC_TIMELINE", 1),)))),
                                  want_ptx=True)
    # one stamp each at a unit's start, mainloop end, fix-up end (two sites) and epilogue end (two sites)
    assert timed.ptx.count("%globaltimer") == 6 and ".global .align 8 .b8 rc_timeline" in timed.ptx
    assert _usage(timed) == (0, 0) == _usage(plain)


def test_timeline_options():
    t = helpers.bench_script("timeline")
    assert t.parse_opts("") == {}
    assert t.parse_opts("_pingpong=True,_block_n=128,_cluster=(1;2),_splits=None") == \
        {"_pingpong": True, "_block_n": 128, "_cluster": (1, 2), "_splits": None}
    for bad in ("pingpong=True", "_block_n=", "_swap=yes"):
        with pytest.raises(ValueError, match="--opts"):
            t.parse_opts(bad)
    assert t.parse_shape("2048x2624x2048") == (2048, 2624, 2048)
    for bad in ("2048x2624", "2048x2624xK", "0x8x8"):
        with pytest.raises(ValueError, match="--shape"):
            t.parse_shape(bad)


def test_timeline_bad_arguments_exit_2_before_any_gpu_work(capsys):
    t = helpers.bench_script("timeline")
    assert t.main(["--shape", "64x64"]) == 2 and "--shape" in capsys.readouterr().err
    assert t.main(["--shape", "64x64x64", "--opts", "block_n=128"]) == 2 and "--opts" in capsys.readouterr().err
