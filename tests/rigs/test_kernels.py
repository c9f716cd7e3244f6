"""The fatbin reader on binaries nvcc made (fixtures/kernels/README.md) and on ELF files
assembled here byte by byte."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pytest

from rigs.kernels import (
    FATBIN_MAGIC,
    KIND_PTX,
    KIND_SASS,
    KernelArchs,
    KernelReadError,
    KernelReport,
    read_kernels,
)

FIXTURES = Path(__file__).parent / "fixtures" / "kernels"


def entry(kind: int, arch: int, payload: bytes = b"\0" * 24) -> bytes:
    header = struct.pack(
        "<HHIQIIHHIIIQQQ", kind, 0x0101, 64, len(payload), 0, 0, 8, 1, arch, 0, 0, 0x11, 0, 0
    )
    return header + payload


def fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body


def elf(sections: dict[str, tuple[int, bytes]]) -> bytes:
    """A minimal 64-bit little-endian ELF: a null section, the given (type, bytes), .shstrtab."""
    names = b"\0"
    name_at = {}
    for name in [*sections, ".shstrtab"]:
        name_at[name] = len(names)
        names += name.encode() + b"\0"
    data = b""
    placed = []
    offset = 64
    for name, (kind, content) in sections.items():
        placed.append((name_at[name], kind, offset, len(content)))
        data += content
        offset += len(content)
    placed.append((name_at[".shstrtab"], 3, offset, len(names)))
    data += names
    shoff = 64 + len(data)
    table = b"\0" * 64
    for name, kind, at, size in placed:
        table += struct.pack("<IIQQQQIIQQ", name, kind, 0, 0, at, size, 0, 0, 1, 0)
    ident = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(placed) + 1, len(placed)
    )
    return header + data + table


def test_nvcc_object_sass_and_ptx() -> None:
    found = read_kernels(FIXTURES / "k_sm75_compute80.o").archs
    assert found.sass == {75}
    assert found.ptx == {80}
    assert found.runnable_on("7.5") == ["sm_75"]
    assert found.runnable_on("8.6") == ["compute_80"]  # sm_75 SASS does not run on 8.x


def test_nvcc_shared_library_without_turing_code_runs_nowhere_on_turing() -> None:
    found = read_kernels(FIXTURES / "libk_sm80_sm90.so").archs
    assert found.sass == {80, 90}
    assert found.ptx == frozenset()
    assert found.runnable_on("7.5") == []
    assert found.runnable_on("8.9") == ["sm_80"]
    assert found.runnable_on("9.0") == ["sm_90"]


def test_nvcc_raw_fatbin_ptx_is_jit_compiled_upwards() -> None:
    found = read_kernels(FIXTURES / "k_sm86_compute75.fatbin").archs
    assert found.describe() == "SASS sm_86; PTX compute_75"
    assert found.runnable_on("7.5") == ["compute_75"]
    assert found.runnable_on("7.0") == []


def test_directory_is_read_binary_by_binary() -> None:
    found = read_kernels(FIXTURES)
    # k.cu and README.md carry no device code
    assert sorted(found.binaries) == [
        "k_sm75_compute80.o",
        "k_sm86_compute75.fatbin",
        "libk_sm80_sm90.so",
    ]
    assert found.archs.sass == {75, 80, 86, 90}
    assert found.archs.ptx == {75, 80}
    # The union has sm_75, but one library has nothing a T4G runs: the install does not run.
    assert found.unrunnable_on("7.5") == ["libk_sm80_sm90.so"]
    assert not found.runs_on("7.5")
    assert found.runs_on("8.6")  # sm_80 and PTX compute_80 run on Ampere 8.6


def test_wheel_members_are_read(tmp_path: Path) -> None:
    wheel = tmp_path / "pkg-1.0-cp312-cp312-linux_aarch64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(FIXTURES / "libk_sm80_sm90.so", "pkg/lib/libk.so.12")
        archive.writestr("pkg/__init__.py", "")
    found = read_kernels(wheel)
    assert found.binaries == {"pkg/lib/libk.so.12": KernelArchs(frozenset({80, 90}))}
    assert found.runs_on("9.0")


def test_several_fatbins_with_padding_in_one_section(tmp_path: Path) -> None:
    section = (
        fatbin(entry(KIND_SASS, 75))
        + b"\0" * 8
        + fatbin(entry(KIND_PTX, 90), entry(KIND_SASS, 120))
    )
    path = tmp_path / "lib.so"
    path.write_bytes(elf({".text": (1, b"\x90" * 16), ".nv_fatbin": (1, section)}))
    found = read_kernels(path).archs
    assert found.sass == {75, 120}
    assert found.ptx == {90}


def test_relocatable_section_counts_and_nobits_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "lib.so"
    path.write_bytes(
        elf({"__nv_relfatbin": (1, fatbin(entry(KIND_SASS, 89))), ".nv_fatbin": (8, b"")})
    )
    assert read_kernels(path).binaries == {"lib.so": KernelArchs(frozenset({89}))}


def test_elf_without_device_code_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "libplain.so"
    path.write_bytes(elf({".text": (1, b"\xc3")}))
    found = read_kernels(path)
    assert found.empty
    assert not found.runs_on("7.5")  # no device code at all is not "runs"
    assert found.archs.describe() == "SASS none; PTX none"


def test_truncated_fatbin_is_an_error_not_an_empty_answer(tmp_path: Path) -> None:
    whole = fatbin(entry(KIND_SASS, 75))
    path = tmp_path / "lib.so"
    path.write_bytes(elf({".nv_fatbin": (1, whole[:-8])}))
    with pytest.raises(KernelReadError, match="overruns"):
        read_kernels(path)


def test_big_endian_or_32_bit_elf_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lib32.so"
    path.write_bytes(b"\x7fELF\x01\x01\x01" + b"\0" * 57)
    with pytest.raises(KernelReadError, match="64-bit little-endian"):
        read_kernels(path)


def test_union_of_reports() -> None:
    both = KernelArchs(frozenset({75})) | KernelArchs(frozenset(), frozenset({80}))
    assert both.runnable_on("8.0") == ["compute_80"]
    report = KernelReport({"a.so": KernelArchs(frozenset({75}))}) | KernelReport(
        {"b.so": KernelArchs(frozenset({80}))}
    )
    assert report.unrunnable_on("7.5") == ["b.so"]
