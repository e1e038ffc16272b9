"""A kernel's resource usage read from its cubin: no GPU, no compile log.

A cubin is a little-endian ELF64 file.  ptxas records what each function uses
as attributes in ``.nv.info`` sections, one record after another: a format
byte, an attribute byte, then by format

    EIFMT_NVAL (1)  two unused bytes
    EIFMT_BVAL (2)  a byte value and a pad byte
    EIFMT_HVAL (3)  a 16-bit value
    EIFMT_SVAL (4)  a 16-bit length and that many bytes

The section ``.nv.info`` holds, for every function, SVAL records whose
payload is (symbol index, value), both 32-bit: EIATTR_REGCOUNT (0x2f),
EIATTR_FRAME_SIZE (0x11, ptxas's "bytes stack frame"), EIATTR_MIN_STACK_SIZE
(0x12) and, for call graphs that need more, EIATTR_MAX_STACK_SIZE (0x23).  A
kernel's static shared memory is the size of its ``.nv.shared.<kernel>``
section less the block that sm_90 cubins reserve in it for the system
(the ``.nv.reservedSmem`` symbols; 1 KB on sm_90).  Checked against ptxas's
``-v`` report (registers, stack frame, static shared memory) on kernels with
and without local arrays, spills, calls and static shared memory.

Spill bytes are not recorded in the cubin; spills live in the stack frame,
so a kernel whose frame is 0 bytes spills nothing.
"""
from __future__ import annotations

import struct

EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4
EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_MAX_STACK_SIZE = 0x23
EIATTR_REGCOUNT = 0x2F
_PER_FUNCTION = {EIATTR_REGCOUNT: "registers", EIATTR_FRAME_SIZE: "stack", EIATTR_MIN_STACK_SIZE: "min_stack",
                 EIATTR_MAX_STACK_SIZE: "max_stack"}
RESERVED_SMEM = 1024
"""Bytes at the start of ``.nv.shared.<kernel>`` that sm_90 cubins reserve for the
system (the cubin then names a ``.nv.reservedSmem`` symbol); not the kernel's own."""


class CubinError(ValueError):
    """The bytes are not a cubin, or do not describe the kernel asked for."""


def _sections(data: bytes) -> list[tuple[str, int, int, int]]:
    """(name, type, offset, size) of every section."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise CubinError("not a little-endian ELF64 cubin")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = raw[shstrndx][4]

    def name(offset):
        start = names_at + offset
        return data[start:data.index(b"\0", start)].decode()
    return [(name(s[0]), s[1], s[4], s[5]) for s in raw]


def _symbols(data: bytes, sections) -> dict[str, int]:
    """Symbol name -> index, from .symtab and its string table .strtab."""
    by_name = {s[0]: s for s in sections}
    if ".symtab" not in by_name or ".strtab" not in by_name:
        raise CubinError("the cubin has no symbol table")
    _, _, off, size = by_name[".symtab"]
    strtab = by_name[".strtab"][2]
    out = {}
    for i in range(size // 24):
        st_name = struct.unpack_from("<I", data, off + 24 * i)[0]
        start = strtab + st_name
        out.setdefault(data[start:data.index(b"\0", start)].decode(), i)
    return out


def _records(data: bytes, off: int, size: int):
    """(attribute, value) of each record of one .nv.info section: an int for
    HVAL/BVAL, bytes for SVAL, None for NVAL."""
    p, end = off, off + size
    while p + 4 <= end:
        fmt, attr = data[p], data[p + 1]
        if fmt == EIFMT_SVAL:
            length = struct.unpack_from("<H", data, p + 2)[0]
            yield attr, data[p + 4:p + 4 + length]
            p += 4 + length
        elif fmt == EIFMT_HVAL:
            yield attr, struct.unpack_from("<H", data, p + 2)[0]
            p += 4
        elif fmt == EIFMT_BVAL:
            yield attr, data[p + 2]
            p += 4
        elif fmt == EIFMT_NVAL:
            yield attr, None
            p += 4
        else:
            raise CubinError(f"unknown .nv.info record format {fmt} at byte {p}")


def kernel_resources(data: bytes, kernel: str) -> dict:
    """``{"registers", "stack", "min_stack", "max_stack", "static_smem"}`` of
    the function ``kernel`` in the cubin ``data`` (sizes in bytes; "stack" is
    the frame, as ptxas's "bytes stack frame"; "max_stack" only where the
    cubin records it).  Raises :class:`CubinError` when the cubin has no
    such function or no register count for it, or is cut short."""
    try:
        return _kernel_resources(bytes(data), kernel)
    except CubinError:
        raise
    except (struct.error, IndexError, ValueError) as e:    # a truncated or damaged file
        raise CubinError(f"not a readable cubin ({type(e).__name__}: {e})") from None


def _kernel_resources(data: bytes, kernel: str) -> dict:
    sections = _sections(data)
    symbol = _symbols(data, sections).get(kernel)
    if symbol is None:
        raise CubinError(f"the cubin has no symbol {kernel!r}")
    out: dict = {}
    for name, _, off, size in sections:
        if name != ".nv.info":
            continue
        for attr, value in _records(data, off, size):
            key = _PER_FUNCTION.get(attr)
            if key is not None and isinstance(value, bytes) and len(value) >= 8:
                sym, v = struct.unpack_from("<II", value)
                if sym == symbol:
                    out[key] = v
    if "registers" not in out:
        raise CubinError(f"the cubin records no register count for {kernel!r}")
    out.setdefault("stack", 0)
    out.setdefault("min_stack", 0)
    shared = next((size for name, _, _, size in sections if name == f".nv.shared.{kernel}"), 0)
    reserved = RESERVED_SMEM if any(name.startswith(".nv.shared.reserved") for name, *_ in sections) else 0
    out["static_smem"] = max(0, shared - reserved)
    return out
