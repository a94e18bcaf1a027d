"""`gpuspan selftest` from the wheel's command (`python -m gpuspan`), against the fake NVML
answering as libcuda too: each device's allocation is in the held span's peak, the spike's
and this process's figures, and the command exits 0."""

import subprocess
import sys

from conftest import clean_env


def test_every_check_passes_on_the_fake_driver_pair(tmp_path, fake_nvml):
    # The same file as libcuda: one library, one state, as NVML and CUDA share a driver.
    (tmp_path / "libcuda.so").symlink_to(fake_nvml)
    env = clean_env(
        GPUSPAN_NVML_LIB=fake_nvml,
        LD_LIBRARY_PATH=tmp_path,
        FAKE_NVML_DEVICES=2,
        FAKE_CUDA_CONTEXT_MIB=300,
    )
    proc = subprocess.run(
        [sys.executable, "-m", "gpuspan", "selftest", "--mib", "128"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [" ".join(line.split()) for line in proc.stdout.splitlines()]
    assert rows[0] == (
        "gpuspan selftest: 2 of 2 device(s) reached through CUDA, 128 MiB allocated on each, "
        "sampling every 5ms"
    )
    for gpu in (0, 1):
        assert rows[2 + gpu] == f"{gpu} NVIDIA H200 (fake) 300 MiB 128 MiB 128 MiB 128 MiB 128 MiB ok"
