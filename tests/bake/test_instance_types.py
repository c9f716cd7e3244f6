"""The instance-type catalog: what the sweep, the bake and `rig check` read about a type."""

import pytest

from hardware.instance_types import (
    BUILDERS,
    DLAMI_PARAMETERS,
    GPU_TYPES,
    UnknownInstanceType,
    cc_number,
    get_instance_type,
)


def test_both_turing_types_force_float16_and_differ_in_arch_and_image() -> None:
    g5g, g4dn = get_instance_type("g5g.2xlarge"), get_instance_type("g4dn.xlarge")
    assert (g5g.arch, g5g.gpu, g5g.vcpus) == ("aarch64", "T4G", 8)
    assert (g4dn.arch, g4dn.gpu, g4dn.vcpus) == ("x86_64", "T4", 4)
    assert g5g.dtype == g4dn.dtype == "float16"
    assert g5g.ami_parameter == DLAMI_PARAMETERS["aarch64"]
    assert "/arm64/" in g5g.ami_parameter
    assert g4dn.ami_parameter == DLAMI_PARAMETERS["x86_64"]
    assert g5g.price("us-east-1") == 0.556
    assert g4dn.price("us-east-1") == 0.526
    assert GPU_TYPES[:2] == ["g5g.2xlarge", "g4dn.xlarge"]  # the targets first


def test_the_gpu_decides_the_dtype_and_every_type_is_priced_in_both_regions() -> None:
    for name in GPU_TYPES:
        itype = get_instance_type(name)
        forced = itype.dtype
        assert forced == ("float16" if itype.gpu in ("T4", "T4G") else None), name
        assert itype.arch == ("aarch64" if name.startswith("g5g.") else "x86_64"), name
        assert set(itype.on_demand_usd_per_hour) == {"us-east-1", "us-west-2"}, name
    assert get_instance_type("g6.xlarge").compute_capability == "8.9"
    assert get_instance_type("g5.2xlarge").compute_capability == "8.6"


def test_builders_have_no_gpu_and_match_their_arch() -> None:
    for arch, name in BUILDERS.items():
        builder = get_instance_type(name)
        assert builder.arch == arch
        assert builder.gpu is None
        assert builder.dtype is None


def test_unknown_types_and_regions_are_named() -> None:
    with pytest.raises(UnknownInstanceType, match=r"'p5\.48xlarge' is not supported"):
        get_instance_type("p5.48xlarge")
    with pytest.raises(
        UnknownInstanceType, match=r"no on-demand price for g4dn\.xlarge in eu-west-9"
    ):
        get_instance_type("g4dn.xlarge").price("eu-west-9")


def test_compute_capability_numbers() -> None:
    assert cc_number("7.5") == 75
    assert cc_number("12.0") == 120
    with pytest.raises(ValueError, match=r"MAJOR\.MINOR"):
        cc_number("75")
