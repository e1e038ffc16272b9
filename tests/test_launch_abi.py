"""The ctypes launch configuration (rawcoop.launch.LaunchConfig) against
cuda-bindings' own CUlaunchConfig: the same bytes for the same launch, so the
driver reads what the bindings would have passed.  CPU only (no launch)."""
import ctypes

import pytest

from rawcoop import launch
from rawcoop._cuda import driver

CONFIG_BYTES = 56        # sizeof(CUlaunchConfig) on 64-bit
ATTR_BYTES = 72          # sizeof(CUlaunchAttribute)


def _bindings_config(grid, block, smem, cluster, pdl, stream):
    cfg = driver.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block, 1, 1
    cfg.sharedMemBytes = smem
    cfg.hStream = driver.CUstream(stream)
    attrs = []
    if cluster != (1, 1, 1):
        a = driver.CUlaunchAttribute()
        a.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z = cluster
        attrs.append(a)
    if pdl:
        a = driver.CUlaunchAttribute()
        a.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        a.value.programmaticStreamSerializationAllowed = 1
        attrs.append(a)
    cfg.attrs = attrs
    cfg.numAttrs = len(attrs)
    return cfg


def _split(raw: bytes):
    """(the config's bytes without the attribute pointer, that pointer)."""
    return raw[:40] + raw[48:], int.from_bytes(raw[40:48], "little")


def test_struct_sizes():
    assert ctypes.sizeof(launch.LaunchConfig) == CONFIG_BYTES
    assert ctypes.sizeof(launch.LaunchAttribute) == ATTR_BYTES
    assert launch.LaunchConfig.stream.offset == 32 and launch.LaunchConfig.attrs.offset == 40
    assert launch.LaunchAttribute.value.offset == 8


@pytest.mark.parametrize("grid,block,smem,cluster,pdl", [
    ((132, 1, 1), 384, 232448, (1, 1, 1), False),
    ((132, 1, 1), 384, 232448, (2, 1, 1), False),
    ((66, 1, 1), 384, 200000, (1, 1, 1), True),
    ((128, 1, 1), 384, 1024, (2, 1, 1), True),
    ((6, 4, 2), 64, 0, (3, 2, 1), False),
])
def test_same_bytes_as_cuda_bindings(grid, block, smem, cluster, pdl):
    stream = 0x7F1234567890
    ours = launch.launch_config(grid, block, smem, cluster, pdl)
    ours.stream = stream
    theirs = _bindings_config(grid, block, smem, cluster, pdl, stream)
    raw_ours = ctypes.string_at(ctypes.addressof(ours), CONFIG_BYTES)
    raw_theirs = ctypes.string_at(theirs.getPtr(), CONFIG_BYTES)
    body_ours, attrs_ours = _split(raw_ours)
    body_theirs, attrs_theirs = _split(raw_theirs)
    assert body_ours == body_theirs
    n = ours.num_attrs
    assert n == (cluster != (1, 1, 1)) + pdl
    if n:
        assert ctypes.string_at(attrs_ours, n * ATTR_BYTES) == ctypes.string_at(attrs_theirs, n * ATTR_BYTES)


def test_grid_must_be_a_multiple_of_the_cluster():
    with pytest.raises(ValueError, match="not a multiple of the cluster"):
        launch.launch_config((133, 1, 1), 384, 0, (2, 1, 1))
