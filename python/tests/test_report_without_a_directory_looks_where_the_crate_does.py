"""``gpuspan.report()`` with no directory reads the runs where the crate writes them:
``GPUSPAN_RUN_DIR`` as the crate reads it (a blank variable is unset, as for every
setting), else ``gpuspan-runs``."""

from conftest import clean_env, run_python

import gpuspan

SCRIPT = """
import gpuspan

gpuspan.init(run_id="r", summary=False)
with gpuspan.epoch(0):
    with gpuspan.step(0):
        pass
"""


def test_a_blank_run_dir_variable_reads_gpuspan_runs(tmp_path, fake_nvml, monkeypatch):
    run_python(SCRIPT, tmp_path, clean_env(GPUSPAN_NVML_LIB=fake_nvml))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUSPAN_RUN_DIR", "  ")
    report = gpuspan.report()
    assert [path for path, *_ in report.runs] == ["gpuspan-runs/r"]
    assert [row["steps"] for row in report.epochs] == [1]


def test_the_run_dir_variable_names_where_runs_are_read(tmp_path, fake_nvml, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    run_python(SCRIPT, tmp_path, clean_env(GPUSPAN_NVML_LIB=fake_nvml, GPUSPAN_RUN_DIR=elsewhere))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUSPAN_RUN_DIR", str(elsewhere))
    report = gpuspan.report()
    assert [path for path, *_ in report.runs] == [str(elsewhere / "r")]
