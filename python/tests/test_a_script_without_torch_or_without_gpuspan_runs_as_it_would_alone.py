"""`gpuspan run`'s bootstrap never changes a program: a script that does not import torch
gets no warning and no step span, and an interpreter that has torch but cannot import gpuspan
runs the training as it would alone, with one warning line that says how to fix it. Both get
the `run` span and keep their exit code. A `sitecustomize` the environment already had still
runs."""

import subprocess
import sys
import textwrap

from conftest import TORCH_ONLY, clean_env, gpuspan_run, interpreter_without_gpuspan, read_spans

NO_TORCH = """
import json, sys
print(json.dumps({"argv": sys.argv[1:]}))
sys.exit(4)
"""


def test_a_script_without_torch_runs_untouched(tmp_path, fake_nvml):
    (tmp_path / "tool.py").write_text(textwrap.dedent(NO_TORCH))
    env = clean_env(GPUSPAN_NVML_LIB=fake_nvml, GPUSPAN_RUN_ID="r")
    proc = gpuspan_run([sys.executable, "tool.py", "a b", "--x"], tmp_path, env)
    assert proc.returncode == 4, proc.stderr
    assert proc.stdout == '{"argv": ["a b", "--x"]}\n'
    assert "warning" not in proc.stderr
    spans = read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")
    assert [s["name"] for s in spans] == ["run"]


def test_a_sitecustomize_the_environment_had_still_runs(tmp_path, fake_nvml):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.own_site_ran = True\n")
    (tmp_path / "tool.py").write_text("import sys\nprint(getattr(sys, 'own_site_ran', False))\n")
    env = clean_env(GPUSPAN_NVML_LIB=fake_nvml, GPUSPAN_RUN_ID="r", PYTHONPATH=site)
    proc = gpuspan_run([sys.executable, "tool.py"], tmp_path, env)
    assert (proc.returncode, proc.stdout) == (0, "True\n"), proc.stderr


def test_an_interpreter_that_cannot_import_gpuspan_trains_as_it_would_alone(tmp_path, fake_nvml):
    python = interpreter_without_gpuspan(tmp_path)
    (tmp_path / "train.py").write_text(textwrap.dedent(TORCH_ONLY))
    alone = subprocess.run(
        [str(python), "train.py"], cwd=tmp_path, capture_output=True, text=True,
        env=clean_env(), timeout=300,
    )
    assert alone.returncode == 5, alone.stderr
    no_gpuspan = subprocess.run([str(python), "-c", "import gpuspan"], capture_output=True, text=True)
    assert "No module named 'gpuspan'" in no_gpuspan.stderr
    env = clean_env(GPUSPAN_NVML_LIB=fake_nvml, GPUSPAN_RUN_ID="r")
    proc = gpuspan_run([str(python), "train.py"], tmp_path, env)
    assert proc.returncode == 5, proc.stderr
    assert proc.stdout == alone.stdout
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1, proc.stderr
    assert f"the gpuspan package is not installed for {python}" in warnings[0]
    assert f"{python} -m pip install gpuspan" in warnings[0]
    spans = read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")
    assert [s["name"] for s in spans] == ["run"]
