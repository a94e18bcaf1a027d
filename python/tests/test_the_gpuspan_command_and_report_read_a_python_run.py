"""A script that never calls shutdown() still writes its run directory (at interpreter
exit); the wheel's `gpuspan` command and `gpuspan.report()` (terminal and Jupyter) read it."""

import subprocess
import sys
from pathlib import Path

from conftest import TWO_EPOCHS, clean_env, run_python

import gpuspan


def gpuspan_command():
    """The console script installed beside this interpreter."""
    return str(Path(sys.executable).with_name("gpuspan"))


def test_a_run_without_shutdown_is_written_and_reported(tmp_path, fake_nvml):
    env = clean_env(GPUSPAN_NVML_LIB=fake_nvml, FAKE_NVML_USED_MIB=2048)
    proc = run_python(TWO_EPOCHS.format(run_id="r"), tmp_path, env)
    # The summary table is printed (on standard error) at exit.
    assert proc.stdout == "trained\n"
    assert "gpuspan: run r (gpuspan-runs/r)" in proc.stderr
    assert "epoch  steps" in proc.stderr
    run = tmp_path / "gpuspan-runs" / "r"
    assert (run / "traces.jsonl").is_file()

    command = subprocess.run(
        [gpuspan_command(), "report", str(tmp_path / "gpuspan-runs")],
        capture_output=True, text=True, env=env, check=True,
    )
    lines = command.stdout.splitlines()
    assert lines[0] == str(run)
    rows = [line.split() for line in lines[2:4]]
    assert [row[:2] for row in rows] == [["0", "3"], ["1", "3"]]
    assert all(row[4:10] == ["2.0", "GiB"] * 3 for row in rows), lines

    report = gpuspan.report(run)
    assert [(r["epoch"], r["steps"], r["gpu_peak"]) for r in report.epochs] == [
        (0, 3, 2048 * 1024 * 1024),
        (1, 3, 2048 * 1024 * 1024),
    ]
    assert "epoch  steps" in repr(report) and str(run) in repr(report)
    page = report._repr_html_()
    assert page.count("<tr><td>") == 2
    assert "<td>2048</td>" in page and "nvml" in page


def test_report_names_a_directory_without_runs(tmp_path):
    try:
        gpuspan.report(tmp_path)
    except ValueError as error:
        assert str(tmp_path) in str(error) and "no run" in str(error)
    else:
        raise AssertionError("report() of an empty directory did not raise")


def test_the_command_has_report_and_watch(tmp_path, fake_nvml):
    env = clean_env(GPUSPAN_NVML_LIB=fake_nvml)
    help_text = subprocess.run(
        [gpuspan_command(), "--help"], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert "report" in help_text and "watch" in help_text
    watch = subprocess.run(
        [gpuspan_command(), "watch", "--every", "50ms", "--count", "2"],
        capture_output=True, text=True, env=env, check=True, timeout=60,
    )
    assert watch.stdout.splitlines() == ["gpu 0: 1024 MiB / 143771 MiB"] * 2
    failed = subprocess.run(
        [gpuspan_command(), "report", str(tmp_path)], capture_output=True, text=True, env=env
    )
    assert failed.returncode == 1 and "holds no run" in failed.stderr
    module = subprocess.run(
        [sys.executable, "-m", "gpuspan", "--version"],
        capture_output=True, text=True, env=env, check=True, cwd=tmp_path,
    )
    assert module.stdout.strip() == f"gpuspan {gpuspan.__version__}"
