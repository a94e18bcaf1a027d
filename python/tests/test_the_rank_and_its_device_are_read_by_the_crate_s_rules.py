"""The package asks the crate which rank this is and which device it computes on, so the
Python side and the Rust core read ``GPUSPAN_DEVICES``, ``CUDA_VISIBLE_DEVICES`` and the
launchers' rank variables by one set of rules."""

import pathlib
import types

import pytest

from gpuspan import _native, _rank_device


def cuda_on(ordinal, count):
    """A torch whose CUDA computes on ``ordinal`` and gives no UUID."""
    cuda = types.SimpleNamespace(
        is_initialized=lambda: True,
        current_device=lambda: ordinal,
        device_count=lambda: count,
        get_device_properties=lambda i: types.SimpleNamespace(uuid=None),
    )
    return types.SimpleNamespace(cuda=cuda, version=types.SimpleNamespace(hip=None))


def rocm_on(ordinal, count, uuid=None):
    """A ROCm build of torch (``torch.version.hip`` set) computing on HIP's ``ordinal``."""
    torch = cuda_on(ordinal, count)
    torch.cuda.get_device_properties = lambda i: types.SimpleNamespace(uuid=uuid)
    torch.version = types.SimpleNamespace(hip="6.2.41133", cuda=None)
    return torch


# Two AMD GPUs; ROCm's order (KFD's) is GPU-7b1d0e6f5a4c3b21, then GPU-2a8c4c9f3b6e1d52.
TWO_AMD_GPUS = (pathlib.Path(__file__).resolve().parents[2]
                / "tests/fixtures/drm/two-amd-gpus-with-kfd/sys")


@pytest.fixture
def clean(monkeypatch):
    for var in ("GPUSPAN_DEVICES", "CUDA_VISIBLE_DEVICES", "RANK", "SLURM_PROCID",
                "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "ROCR_VISIBLE_DEVICES",
                "HIP_VISIBLE_DEVICES", "GPUSPAN_SYSFS_ROOT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return monkeypatch


def test_a_blank_gpuspan_devices_is_unset_and_the_rank_measures_its_own_device(clean):
    clean.setenv("GPUSPAN_DEVICES", " ")
    clean.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert _native.devices_chosen() is False
    assert _rank_device.init_settings(cuda_on(1, 2)) == {"devices": "6"}


def test_a_chosen_scope_is_left_to_the_core(clean):
    clean.setenv("GPUSPAN_DEVICES", "4")
    assert _rank_device.init_settings(cuda_on(1, 2)) == {}


def test_cuda_visible_devices_is_read_as_the_core_reads_it(clean):
    clean.setenv("CUDA_VISIBLE_DEVICES", " 4 , GPU-ABC ")
    assert _native.cuda_device(0) == "4"
    assert _native.cuda_device(1) == "GPU-abc"
    clean.setenv("CUDA_VISIBLE_DEVICES", "4,GPU-5f8e3a7c,-1,6")
    assert _native.cuda_device(1) == "GPU-5f8e3a7c"
    # CUDA stops at -1: its device 2 is past the end, and the number stands in.
    assert _native.cuda_device(2) == "2"
    clean.setenv("CUDA_VISIBLE_DEVICES", "cuda:0")
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES"):
        _native.cuda_device(0)


def test_the_rank_comes_from_the_launcher_s_variable(clean):
    assert _native.launcher_rank() is None
    clean.setenv("SLURM_PROCID", "3")
    assert _native.launcher_rank() == 3
    clean.setenv("RANK", "x")
    with pytest.raises(ValueError, match='RANK="x"'):
        _native.launcher_rank()


def test_under_rocm_the_rank_s_device_follows_rocr_then_hip_visible_devices(clean):
    clean.setenv("GPUSPAN_SYSFS_ROOT", str(TWO_AMD_GPUS))
    clean.setenv("ROCR_VISIBLE_DEVICES", "1")
    assert _rank_device.init_settings(rocm_on(0, 1)) == {"devices": "GPU-2a8c4c9f3b6e1d52"}
    clean.setenv("ROCR_VISIBLE_DEVICES", "1,0")
    clean.setenv("HIP_VISIBLE_DEVICES", "1")
    assert _rank_device.init_settings(rocm_on(0, 1)) == {"devices": "GPU-7b1d0e6f5a4c3b21"}


def test_under_rocm_cuda_visible_devices_counts_only_without_hip_visible_devices(clean):
    clean.setenv("GPUSPAN_SYSFS_ROOT", str(TWO_AMD_GPUS))
    clean.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert _rank_device.init_settings(rocm_on(0, 1)) == {"devices": "GPU-2a8c4c9f3b6e1d52"}
    clean.setenv("HIP_VISIBLE_DEVICES", "0")
    assert _rank_device.init_settings(rocm_on(0, 1)) == {"devices": "GPU-7b1d0e6f5a4c3b21"}


def test_under_rocm_the_uuid_torch_gives_does_not_stand_for_the_device(clean):
    # HIP's UUID is not the GPU-<unique_id> that names an AMD device (hw.id).
    clean.setenv("GPUSPAN_SYSFS_ROOT", str(TWO_AMD_GPUS))
    clean.setenv("ROCR_VISIBLE_DEVICES", "1")
    torch = rocm_on(0, 1, uuid="37623164-3065-3666-3561-346333623231")
    assert _rank_device.init_settings(torch) == {"devices": "GPU-2a8c4c9f3b6e1d52"}


def test_under_rocm_a_bad_hip_visible_devices_names_the_variable(clean):
    clean.setenv("HIP_VISIBLE_DEVICES", "gpu0")
    with pytest.raises(ValueError, match="HIP_VISIBLE_DEVICES"):
        _native.hip_device(0)
