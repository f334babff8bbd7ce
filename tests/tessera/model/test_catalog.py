"""The GPU / instance catalog is self-consistent and matches NVIDIA's published MIG figures."""
from __future__ import annotations

import pytest

from tessera.model.catalog import GPU_MODELS, INSTANCE_TYPES, default_gpu_software, gpu_model, instance_type
from tessera.model.mig import layout_problems, mig_resources, resolve_layout


@pytest.mark.parametrize("model", [m for m in GPU_MODELS.values() if m.mig_capable], ids=lambda m: m.name)
def test_every_named_layout_fits_its_gpu(model: object) -> None:
    from tessera.model.catalog import GpuModelSpec

    assert isinstance(model, GpuModelSpec)
    for name, layout in model.mig_layouts.items():
        assert layout_problems(model, name) == [], name
        assert resolve_layout(model, name) == layout


@pytest.mark.parametrize(
    ("gpu", "profile", "compute", "memory", "count"),
    [
        ("A100-40GB", "1g.5gb", 1, 1, 7),
        ("A100-40GB", "3g.20gb", 3, 4, 2),
        ("A100-40GB", "7g.40gb", 7, 8, 1),
        ("A100-80GB", "1g.20gb", 1, 2, 4),
        ("H100-80GB", "2g.20gb", 2, 2, 3),
        ("H200", "3g.71gb", 3, 4, 2),
        ("A30", "1g.6gb", 1, 1, 4),
        ("A30", "2g.12gb", 2, 2, 2),
        ("H20", "4g.48gb", 4, 4, 1),
    ],
)
def test_mig_profile_figures(gpu: str, profile: str, compute: int, memory: int, count: int) -> None:
    spec = gpu_model(gpu)
    assert spec is not None
    found = spec.mig_profile(profile)
    assert found is not None
    assert (found.compute_slices, found.memory_slices, found.max_count) == (compute, memory, count)


@pytest.mark.parametrize(("gpu", "mig"), [("T4", False), ("A10", False), ("L40S", False), ("V100-32GB", False), ("A30", True), ("H200", True)])
def test_mig_capability(gpu: str, mig: bool) -> None:
    spec = gpu_model(gpu)
    assert spec is not None and spec.mig_capable is mig


@pytest.mark.parametrize(
    ("name", "gpu", "count"),
    [("GN7.2XLARGE32", "T4", 1), ("GN7.10XLARGE160", "T4", 2), ("GN7.20XLARGE320", "T4", 4), ("GT4.4XLARGE96", "A100-40GB", 1), ("GT4.41XLARGE948", "A100-40GB", 8), ("PNV4.7XLARGE116", "A10", 1), ("GN10Xp.20XLARGE320", "V100-32GB", 8)],
)
def test_instance_types(name: str, gpu: str, count: int) -> None:
    spec = instance_type(name)
    assert spec is not None and (spec.gpu_model, spec.gpu_count) == (gpu, count)


def test_every_instance_type_names_a_known_gpu_with_default_software() -> None:
    for spec in INSTANCE_TYPES.values():
        model = gpu_model(spec.gpu_model)
        assert model is not None, spec.name
        software = default_gpu_software(model)
        assert software.supports(model), spec.name


def test_gpu_software_records_are_whole_nvidia_installer_names() -> None:
    """Every record's names are NVIDIA's file names for its versions, never a made-up pattern: the
    CUDA runfile carries the driver it bundles, cuDNN its build number."""
    import re

    from tessera.model.catalog import GPU_SOFTWARE

    for record in GPU_SOFTWARE:
        assert record.driver.name == f"NVIDIA-Linux-x86_64-{record.driver.version}.run"
        assert re.fullmatch(rf"cuda_{re.escape(record.cuda.version)}_\d+\.\d+\.\d+_linux\.run", record.cuda.name), record.cuda.name
        build = re.escape(record.cudnn.version) + r"\.\d+"
        assert re.search(rf"(v|_|-){build}", record.cudnn.name), record.cudnn.name
        assert (record.cudnn.doc_name is None) == (record.cudnn.dev_name is None)
        assert record.source
    assert len({(r.driver.version, r.cuda.version, r.cudnn.version) for r in GPU_SOFTWARE}) == len(GPU_SOFTWARE)


def test_mig_resources_follow_the_strategy() -> None:
    assert mig_resources("single", {"1g.5gb": 7}) == ("nvidia.com/gpu",)
    assert mig_resources("mixed", {"3g.20gb": 1, "1g.5gb": 2}) == ("nvidia.com/mig-3g.20gb", "nvidia.com/mig-1g.5gb")
