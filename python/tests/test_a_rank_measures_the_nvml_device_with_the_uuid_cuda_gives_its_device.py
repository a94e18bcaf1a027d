"""Under ``gpuspan run``, a rank measures the GPU its CUDA device is, found by the UUID CUDA
gives that device, not by taking CUDA's device number as NVML's: CUDA numbers devices
fastest first (its default), NVML by PCI bus, so on a machine with different GPUs the two
orders differ. Without a UUID the number stands in, with one warning where the orders may
differ.

Without a GPU, torch cannot have a CUDA device here, so the rank's torch is a stand-in with
torch's interface (``torch.cuda.is_initialized``, ``current_device``, ``device_count`` and
``get_device_properties(i).uuid``, a ``_CUuuid``: 16 ``bytes``, printed as bare
``8-4-4-4-12`` hex). Everything after it is real: the bootstrap's set-up
(``gpuspan._autorun.ensure_set_up``) or the Lightning and Transformers callbacks
(``gpuspan._frameworks.ensure_init``, with the stand-in as the imported ``torch``), the
core's device scope, and NVML's devices (the fake
libnvidia-ml, whose GPUs have distinct UUIDs), each using a memory of its own, so a span's
peak says which device was measured."""

import json

import pytest
from conftest import MIB, clean_env, run_python


# The fake NVML's UUIDs: GPU i is GPU-00000000-0000-0000-0000-<i, 12 digits>, MIG instance
# m of GPU g MIG-00000000-0000-0000-<g, 4 digits>-<m, 12 digits>.
def gpu_uuid(i):
    return f"00000000-0000-0000-0000-{i:012d}"


def mig_uuid(gpu, mig):
    return f"00000000-0000-0000-{gpu:04d}-{mig:012d}"


def mig_slot(gpu, mig):
    """The fake's device number of a MIG instance, in its live file."""
    return 16 + 7 * gpu + mig


RANK = """
import json, sys, time, types
import gpuspan

class CUuuid:
    # As torch._C._CUuuid: the 16 bytes CUDA gives, printed without a prefix.
    def __init__(self, text):
        self.bytes = list(bytes.fromhex(text.replace("-", "")))
    def __str__(self):
        h = bytes(self.bytes).hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

CUDA_UUIDS = json.loads(sys.argv[1])   # CUDA's devices, in CUDA's order (None: no UUID)
ORDINAL = int(sys.argv[2])              # the rank's current CUDA device
SET_UP_BY = sys.argv[3]                 # who sets gpuspan up

def properties(i):
    if CUDA_UUIDS[i] is None:
        return types.SimpleNamespace(name="GPU")
    return types.SimpleNamespace(name="GPU", uuid=CUuuid(CUDA_UUIDS[i]))

torch = types.SimpleNamespace(
    version=types.SimpleNamespace(cuda="13.2", hip=None),
    cuda=types.SimpleNamespace(
        is_initialized=lambda: True,
        current_device=lambda: ORDINAL,
        device_count=lambda: len(CUDA_UUIDS),
        get_device_properties=properties,
    ),
)
if SET_UP_BY == "bootstrap":
    from gpuspan import _autorun

    assert _autorun.ensure_set_up(torch)
else:
    sys.modules["torch"] = torch
    from gpuspan import _frameworks

    _frameworks.ensure_init()
    del sys.modules["torch"]  # its allocator is not the stand-in's to give
with gpuspan.span("work"):
    time.sleep(0.1)
"""


def measured(tmp_path, fake_nvml, cuda_uuids, ordinal, used, set_up_by="bootstrap", **extra):
    """Runs a rank whose CUDA devices have ``cuda_uuids`` and which computes on
    ``ordinal``, with the fake NVML's devices using ``used`` ({device: MiB}); returns the
    ``work`` span's attributes and the rank's stderr."""
    live = tmp_path / "gpu"
    live.write_text("".join(f"used {d} {mib * MIB}\n" for d, mib in used.items()))
    env = clean_env(
        GPUSPAN_NVML_LIB=fake_nvml, FAKE_NVML_LIVE_FILE=live, GPUSPAN_SAMPLE_INTERVAL="10ms",
        GPUSPAN_RUN_ID="rank", **extra,
    )
    argv = [json.dumps(cuda_uuids), str(ordinal), set_up_by]
    code = f"import sys; sys.argv[1:] = {argv!r}\n" + RANK
    proc = run_python(code, tmp_path, env)
    lines = (tmp_path / "gpuspan-runs" / "rank" / "traces.jsonl").read_text().splitlines()
    spans = [
        span
        for line in lines
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
        if span["name"] == "work"
    ]
    assert len(spans) == 1
    attributes = {a["key"]: next(iter(a["value"].values())) for a in spans[0]["attributes"]}
    return attributes, proc.stderr


# CUDA's order, fastest first, is NVML's GPUs 2, 0, 1.
CUDA_ORDER = [2, 0, 1]


@pytest.mark.parametrize("set_up_by", ["bootstrap", "callback"])
@pytest.mark.parametrize("ordinal", [0, 1, 2])
def test_each_cuda_device_is_measured_on_the_gpu_with_its_uuid(
    tmp_path, fake_nvml, ordinal, set_up_by
):
    used = {0: 1000, 1: 2000, 2: 3000}
    attributes, stderr = measured(
        tmp_path, fake_nvml, [gpu_uuid(i) for i in CUDA_ORDER], ordinal, used, set_up_by,
        FAKE_NVML_DEVICES=3,
    )
    assert int(attributes["gpu.memory.peak"]) == used[CUDA_ORDER[ordinal]] * MIB
    # One device measured, not the node.
    assert not any(k.startswith("gpu.1.") for k in attributes), attributes
    assert "warning" not in stderr, stderr


def test_cuda_visible_devices_given_as_cuda_indexes_are_paired_by_uuid(tmp_path, fake_nvml):
    # CUDA_VISIBLE_DEVICES=1 is CUDA's second-fastest device, NVML's GPU 0: CUDA's one
    # visible device, number 0, has GPU 0's UUID.
    used = {0: 1000, 1: 2000, 2: 3000}
    attributes, _ = measured(
        tmp_path, fake_nvml, [gpu_uuid(0)], 0, used,
        FAKE_NVML_DEVICES=3, CUDA_VISIBLE_DEVICES="1",
    )
    assert int(attributes["gpu.memory.peak"]) == 1000 * MIB


def test_a_mig_instance_is_measured_by_its_uuid(tmp_path, fake_nvml):
    # GPU 1 in MIG mode with two instances; CUDA's device 0 is its second instance.
    used = {0: 1000, mig_slot(1, 0): 4000, mig_slot(1, 1): 5000}
    attributes, _ = measured(
        tmp_path, fake_nvml, [mig_uuid(1, 1), mig_uuid(1, 0), gpu_uuid(0)], 0, used,
        FAKE_NVML_DEVICES=2, FAKE_NVML_MIG="1:2",
    )
    assert int(attributes["gpu.memory.peak"]) == 5000 * MIB
    assert not any(k.startswith("gpu.1.") for k in attributes), attributes


def test_without_a_uuid_the_number_stands_in_and_a_warning_says_it_may_be_another_gpu(
    tmp_path, fake_nvml
):
    used = {0: 1000, 1: 2000, 2: 3000}
    attributes, stderr = measured(
        tmp_path, fake_nvml, [None, None, None], 1, used, FAKE_NVML_DEVICES=3,
    )
    assert int(attributes["gpu.memory.peak"]) == 2000 * MIB
    warnings = [line for line in stderr.splitlines() if "CUDA_DEVICE_ORDER" in line]
    assert len(warnings) == 1, stderr
    assert "PCI_BUS_ID" in warnings[0] and "GPUSPAN_DEVICES" in warnings[0]


def test_without_a_uuid_in_pci_bus_order_the_number_is_right_and_nothing_is_said(
    tmp_path, fake_nvml
):
    used = {0: 1000, 1: 2000, 2: 3000}
    attributes, stderr = measured(
        tmp_path, fake_nvml, [None, None, None], 2, used,
        FAKE_NVML_DEVICES=3, CUDA_DEVICE_ORDER="PCI_BUS_ID",
    )
    assert int(attributes["gpu.memory.peak"]) == 3000 * MIB
    assert "warning" not in stderr, stderr


def test_without_a_uuid_one_device_needs_no_warning(tmp_path, fake_nvml):
    attributes, stderr = measured(tmp_path, fake_nvml, [None], 0, {0: 1000})
    assert int(attributes["gpu.memory.peak"]) == 1000 * MIB
    assert "warning" not in stderr, stderr


def test_the_warning_is_said_once_per_process(capsys, monkeypatch):
    from gpuspan import _rank_device

    monkeypatch.setattr(_rank_device, "_warned", False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    assert _rank_device.by_ordinal(1, 4) == "1"
    assert _rank_device.by_ordinal(1, 4) == "1"
    assert capsys.readouterr().err.count("CUDA_DEVICE_ORDER") == 1


@pytest.mark.parametrize(
    "uuid",
    [
        "5f8e3a7c-2b1d-4e6f-9a0b-c3d4e5f60718",
        "GPU-5f8e3a7c-2b1d-4e6f-9a0b-c3d4e5f60718",
        "5F8E3A7C-2B1D-4E6F-9A0B-C3D4E5F60718",
    ],
)
def test_a_uuid_as_text_names_the_gpu_or_the_mig_instance(uuid):
    from gpuspan._rank_device import by_uuid

    body = "5f8e3a7c-2b1d-4e6f-9a0b-c3d4e5f60718"
    assert by_uuid(uuid) == f"GPU-{body},MIG-{body}"


@pytest.mark.parametrize("uuid", [None, "", "cuda:0", "5f8e3a7c-2b1d-4e6f-9a0b"])
def test_no_uuid_or_one_that_is_not_a_uuid_names_no_device(uuid):
    from gpuspan._rank_device import by_uuid

    assert by_uuid(uuid) is None


def test_before_cuda_is_in_use_the_rank_chooses_no_device():
    import torch

    from gpuspan._rank_device import devices_setting

    assert not torch.cuda.is_initialized()
    assert devices_setting(torch) is None
