"""Which GPU architectures a CUDA binary carries: SASS and PTX entries of its fatbins.

A CUDA shared library (or object) keeps its device code in ELF sections named
`.nv_fatbin` (and `__nv_relfatbin` for relocatable device code). Each holds one or more
fatbins laid end to end:

    fatbin header  (16 B): u32 magic 0xBA55ED50, u16 version, u16 header size, u64 body size
    entry header   (>= 64 B, little-endian):
        u16 kind (1 PTX, 2 ELF = SASS), u16 version, u32 header size, u64 payload size,
        u32 compressed size, u32 -, u16 minor, u16 major, u32 arch (75 = sm_75 / compute_75),
        u32 name offset, u32 name length, u64 flags, ...
    payload        (payload size bytes), then the next entry

Only headers are read (payloads may be compressed), so this needs no CUDA toolkit. Which
entries a GPU runs: SASS for sm_XY runs on compute capability X.Z with Z >= Y (same major);
PTX for compute_XY is compiled by the driver for any capability >= X.Y.

    read_kernels(path) -> KernelReport   # an ELF file, a .fatbin, a wheel or a directory:
                                         # the archs of each binary carrying device code
"""

from __future__ import annotations

import struct
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import BinaryIO

from hardware.instance_types import cc_number

FATBIN_MAGIC = 0xBA55ED50
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
KIND_PTX = 1
KIND_SASS = 2
_ELF_MAGIC = b"\x7fELF"
_FATBIN_HEADER = struct.Struct("<IHHQ")
_ENTRY_HEADER = struct.Struct("<HHIQIIHHI")  # kind .. arch: the first 36 bytes of an entry


class KernelReadError(ValueError):
    """A file that claims to be an ELF or fatbin but whose structure does not parse."""


@dataclass(frozen=True)
class KernelArchs:
    """Architectures as compute capability numbers: 75 means sm_75 (SASS) or compute_75 (PTX)."""

    sass: frozenset[int] = frozenset()
    ptx: frozenset[int] = frozenset()

    def __or__(self, other: KernelArchs) -> KernelArchs:
        return KernelArchs(self.sass | other.sass, self.ptx | other.ptx)

    @property
    def empty(self) -> bool:
        return not self.sass and not self.ptx

    def runnable_on(self, compute_capability: str) -> list[str]:
        """The entries a GPU of this capability ("7.5") can run, e.g. ["sm_75", "compute_70"]."""
        cc = cc_number(compute_capability)
        sass = sorted(a for a in self.sass if a // 10 == cc // 10 and a <= cc)
        ptx = sorted(a for a in self.ptx if a <= cc)
        return [f"sm_{a}" for a in sass] + [f"compute_{a}" for a in ptx]

    def describe(self) -> str:
        sass = " ".join(f"sm_{a}" for a in sorted(self.sass)) or "none"
        ptx = " ".join(f"compute_{a}" for a in sorted(self.ptx)) or "none"
        return f"SASS {sass}; PTX {ptx}"


@dataclass(frozen=True)
class KernelReport:
    """The device code of each binary in an install (a wheel, a venv), binary by binary.

    A union over binaries misleads: torch's aarch64 wheel carries sm_75 only in a 3 MiB
    helper library while libtorch_cuda.so has none. An install runs on a GPU only when
    every binary with device code has something that GPU runs.
    """

    binaries: dict[str, KernelArchs] = field(default_factory=dict)

    def __or__(self, other: KernelReport) -> KernelReport:
        return KernelReport({**self.binaries, **other.binaries})

    @property
    def archs(self) -> KernelArchs:
        union = KernelArchs()
        for archs in self.binaries.values():
            union = union | archs
        return union

    @property
    def empty(self) -> bool:
        return not self.binaries

    def unrunnable_on(self, compute_capability: str) -> list[str]:
        """The binaries with device code but nothing a GPU of this capability runs."""
        return sorted(
            name
            for name, archs in self.binaries.items()
            if not archs.runnable_on(compute_capability)
        )

    def runs_on(self, compute_capability: str) -> bool:
        return not self.empty and not self.unrunnable_on(compute_capability)

    def core(self, patterns: list[str]) -> KernelReport:
        """The binaries matching any pattern (fnmatch on the path or a trailing part of it):
        the ones a runtime cannot work without, e.g. "torch/lib/libtorch_cuda.so"."""
        return KernelReport(
            {
                name: archs
                for name, archs in self.binaries.items()
                if any(fnmatch(name, p) or fnmatch(name, f"*/{p}") for p in patterns)
            }
        )

    def to_json(self) -> dict[str, dict[str, list[int]]]:
        return {
            name: {"sass": sorted(a.sass), "ptx": sorted(a.ptx)}
            for name, a in sorted(self.binaries.items())
        }

    @classmethod
    def from_json(cls, raw: dict[str, dict[str, list[int]]]) -> KernelReport:
        return cls(
            {
                name: KernelArchs(frozenset(a["sass"]), frozenset(a["ptx"]))
                for name, a in raw.items()
            }
        )


def fatbin_entries(data: bytes) -> Iterator[tuple[int, int]]:
    """(kind, arch) of every entry of the fatbins laid end to end in `data`."""
    offset = 0
    while offset + _FATBIN_HEADER.size <= len(data):
        magic, _version, header_size, body_size = _FATBIN_HEADER.unpack_from(data, offset)
        if magic != FATBIN_MAGIC:
            # Fatbins are 8-byte aligned with zero padding between them; skip to the next one.
            found = data.find(struct.pack("<I", FATBIN_MAGIC), offset + 1)
            if found < 0:
                return
            offset = found
            continue
        body = offset + header_size
        end = body + body_size
        if header_size < _FATBIN_HEADER.size or end > len(data):
            raise KernelReadError(f"fatbin at offset {offset} overruns its section")
        entry = body
        while entry + _ENTRY_HEADER.size <= end:
            kind, _v, entry_header, size, _c, _u, _minor, _major, arch = _ENTRY_HEADER.unpack_from(
                data, entry
            )
            if entry_header < _ENTRY_HEADER.size or entry + entry_header + size > end:
                raise KernelReadError(f"fatbin entry at offset {entry} overruns its fatbin")
            yield kind, arch
            entry += entry_header + size
        offset = end


def _archs_of_entries(entries: Iterator[tuple[int, int]]) -> KernelArchs:
    sass: set[int] = set()
    ptx: set[int] = set()
    for kind, arch in entries:
        if kind == KIND_SASS:
            sass.add(arch)
        elif kind == KIND_PTX:
            ptx.add(arch)
    return KernelArchs(frozenset(sass), frozenset(ptx))


def elf_fatbin_sections(stream: BinaryIO) -> Iterator[bytes]:
    """The contents of the fatbin sections of a 64-bit little-endian ELF file."""
    stream.seek(0)
    ident = stream.read(64)
    if len(ident) < 64 or ident[:4] != _ELF_MAGIC:
        raise KernelReadError("not an ELF file")
    if ident[4] != 2 or ident[5] != 1:
        raise KernelReadError("only 64-bit little-endian ELF is read")
    (shoff,) = struct.unpack_from("<Q", ident, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
    if shoff == 0 or shnum == 0:
        return
    if shentsize < 64:
        raise KernelReadError(f"ELF section header size {shentsize} is too small")
    stream.seek(shoff)
    table = stream.read(shentsize * shnum)
    if len(table) < shentsize * shnum:
        raise KernelReadError("ELF section table runs past the end of the file")
    sections = []
    for i in range(shnum):
        name, kind, _flags, _addr, offset, size = struct.unpack_from(
            "<IIQQQQ", table, i * shentsize
        )
        sections.append((name, kind, offset, size))
    if shstrndx >= shnum:
        raise KernelReadError("ELF section-name table index out of range")
    _, _, names_at, names_size = sections[shstrndx]
    stream.seek(names_at)
    names = stream.read(names_size)
    for name_at, kind, offset, size in sections:
        end = names.find(b"\0", name_at)
        name = names[name_at : end if end >= 0 else None].decode("ascii", "replace")
        if name in FATBIN_SECTIONS and kind != 8:  # 8: SHT_NOBITS, no bytes in the file
            stream.seek(offset)
            yield stream.read(size)


def file_kernel_archs(path: Path) -> KernelArchs:
    """The architectures in one ELF file (.so, .o, executable) or raw .fatbin file."""
    with path.open("rb") as stream:
        head = stream.read(4)
        if head == _ELF_MAGIC:
            found = KernelArchs()
            for section in elf_fatbin_sections(stream):
                found = found | _archs_of_entries(fatbin_entries(section))
            return found
        if head == struct.pack("<I", FATBIN_MAGIC):
            stream.seek(0)
            return _archs_of_entries(fatbin_entries(stream.read()))
    return KernelArchs()


def _is_binary_name(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return ".so" in base or base.endswith((".o", ".fatbin", ".cubin")) or "." not in base


def tree_kernels(root: Path) -> KernelReport:
    """Every shared library, object and fatbin under a directory (a venv), by relative path."""
    found: dict[str, KernelArchs] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and _is_binary_name(path.name):
            archs = file_kernel_archs(path)
            if not archs.empty:
                found[str(path.relative_to(root))] = archs
    return KernelReport(found)


def wheel_kernels(wheel: Path) -> KernelReport:
    """Every binary a wheel holds, by its path in the wheel; each unpacked to a temp file."""
    found: dict[str, KernelArchs] = {}
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as tmp:
        for info in archive.infolist():
            if info.is_dir() or not _is_binary_name(info.filename):
                continue
            with archive.open(info) as member:
                if member.read(4) not in (_ELF_MAGIC, struct.pack("<I", FATBIN_MAGIC)):
                    continue
            target = Path(tmp) / "member"
            with archive.open(info) as member, target.open("wb") as out:
                while chunk := member.read(1 << 24):
                    out.write(chunk)
            archs = file_kernel_archs(target)
            if not archs.empty:
                found[info.filename] = archs
            target.unlink()
    return KernelReport(found)


def read_kernels(path: Path) -> KernelReport:
    """The device code under `path`: a wheel, a directory (a venv), or one binary."""
    if path.is_dir():
        return tree_kernels(path)
    if path.suffix == ".whl":
        return wheel_kernels(path)
    archs = file_kernel_archs(path)
    return KernelReport({path.name: archs} if not archs.empty else {})
