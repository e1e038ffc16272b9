"""CPU tests of launch.KernelParams: the packed argument block the repeated
GEMM path hands cuLaunchKernelEx by address (no GPU needed: the bytes are
read back through the same void* array the driver reads)."""
import ctypes
import threading

import pytest

from rawcoop._cuda import driver
from rawcoop.launch import F32, I32, PTR, TENSOR_MAP, U32, KernelParams


def _slot(p: KernelParams, i: int, ctype):
    addr = ctypes.cast(p.address, ctypes.POINTER(ctypes.c_void_p))[i]
    return ctypes.cast(addr, ctypes.POINTER(ctype)).contents.value, addr


def _map(fill: int):
    m = driver.CUtensorMap()
    ctypes.memset(int(m.getPtr()), fill, 128)
    return m


def test_scalars_and_maps_are_read_through_the_pointer_array():
    m0, m1 = _map(0x11), _map(0x22)
    p = KernelParams((m0, 7, -3, 2.5, 0xDEAD0000BEEF, m1, 4000000000),
                     (TENSOR_MAP, I32, I32, F32, PTR, TENSOR_MAP, U32))
    assert _slot(p, 1, ctypes.c_int32)[0] == 7
    assert _slot(p, 2, ctypes.c_int32)[0] == -3
    assert _slot(p, 3, ctypes.c_float)[0] == 2.5
    assert _slot(p, 4, ctypes.c_uint64)[0] == 0xDEAD0000BEEF
    assert _slot(p, 6, ctypes.c_uint32)[0] == 4000000000
    addr0 = ctypes.cast(p.address, ctypes.POINTER(ctypes.c_void_p))[0]
    assert addr0 == int(m0.getPtr())                               # the map's own 128 bytes, not a copy
    assert ctypes.string_at(addr0, 128) == b"\x11" * 128
    assert ctypes.string_at(ctypes.cast(p.address, ctypes.POINTER(ctypes.c_void_p))[5], 128) == b"\x22" * 128
    assert p.values() == (m0, 7, -3, 2.5, 0xDEAD0000BEEF, m1, 4000000000)


def test_set_rewrites_one_argument_in_place():
    m0, m1 = _map(1), _map(2)
    p = KernelParams((m0, 5, 0), (TENSOR_MAP, I32, PTR))
    before, slot_addr = _slot(p, 1, ctypes.c_int32)
    p.set(1, 9)
    p.set(2, 0x1234)
    p.set(0, m1)
    after, slot_addr2 = _slot(p, 1, ctypes.c_int32)
    assert (before, after) == (5, 9) and slot_addr == slot_addr2   # same slot, new value
    assert _slot(p, 2, ctypes.c_uint64)[0] == 0x1234
    assert ctypes.cast(p.address, ctypes.POINTER(ctypes.c_void_p))[0] == int(m1.getPtr())
    p.set(2, 0)
    assert _slot(p, 2, ctypes.c_uint64)[0] == 0


def test_maps_are_kept_alive_by_the_pack():
    p = KernelParams((_map(0x5A),), (TENSOR_MAP,))
    import gc
    gc.collect()
    assert ctypes.string_at(ctypes.cast(p.address, ctypes.POINTER(ctypes.c_void_p))[0], 128) == b"\x5A" * 128


def test_mismatched_lengths_raise():
    with pytest.raises(ValueError, match="2 kernel arguments for 3 parameter types"):
        KernelParams((1, 2), (I32, I32, I32))


def test_gemm_argument_indices_match_the_kernel_signature():
    """run() rewrites C's map, D's map and the workspace pointers by index:
    the indices must name a tensor map, a tensor map and two pointers."""
    import importlib
    G = importlib.import_module("rawcoop.gemm")             # the module (rawcoop.gemm is the function)
    for types in (G._TYPES, G._TYPES_FP8, G._TYPES_BLOCK):
        assert types[G._ARG_C] is TENSOR_MAP and types[G._ARG_D] is TENSOR_MAP
        assert types[G._ARG_WS] is PTR and types[G._ARG_FLAGS] is PTR
    from pathlib import Path
    src = (Path(__file__).resolve().parents[2] / "kernels" / "gemm.cu").read_text()
    sig = src[src.index("gemm_kernel(const __grid_constant__"):]
    sig = sig[sig.index("(") + 1:sig.index("#if")]          # the parameters every variant has
    names = [x.split()[-1].lstrip("*&") for x in sig.split(",") if x.strip()]
    assert len(names) == len(G._TYPES)
    assert (names[G._ARG_C], names[G._ARG_D], names[G._ARG_WS], names[G._ARG_FLAGS]) == \
        ("map_c", "map_d", "workspace", "flags")


def test_the_lock_serialises_set_and_read():
    p = KernelParams((0,), (I32,))
    seen = []

    def worker(v):
        for _ in range(200):
            with p.lock:
                p.set(0, v)
                seen.append(_slot(p, 0, ctypes.c_int32)[0] == v)
    ts = [threading.Thread(target=worker, args=(v,)) for v in (1, 2, 3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(seen) and len(seen) == 600


def test_launch_needs_types_for_plain_values_only():
    """Kernel.launch takes a KernelParams alone (it carries its types); plain
    values without their types are refused before any driver call."""
    from rawcoop.launch import Kernel
    from rawcoop.tile_copy import spec
    k = Kernel(spec(2, 2))
    with pytest.raises(TypeError, match="plain argument values need their types"):
        k.launch(0, (1, 1, 1), 64, 0, 0, (1, 2))
