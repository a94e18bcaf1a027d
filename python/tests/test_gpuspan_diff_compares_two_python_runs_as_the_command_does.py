"""`gpuspan.diff(base, new)` on two Python training runs recorded on the fake NVML, the
second holding 256 MiB more: the object says the step and epoch peaks grew 12.5 %, fails a
5 % limit as `gpuspan diff` exits 1, and prints the command's table (``repr``) and an HTML
table in Jupyter; bad input raises ValueError with the command's message."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MIB, TWO_EPOCHS, clean_env, run_python

import gpuspan


def record(tmp_path, fake_nvml, run_id, used_mib):
    env = clean_env(GPUSPAN_NVML_LIB=fake_nvml, FAKE_NVML_USED_MIB=used_mib)
    run_python(TWO_EPOCHS.format(run_id=run_id), tmp_path, env)
    return tmp_path / "gpuspan-runs" / run_id


def test_a_run_holding_256_mib_more_fails_a_5_percent_limit(tmp_path, fake_nvml):
    base = record(tmp_path, fake_nvml, "base", 2048)
    new = record(tmp_path, fake_nvml, "new", 2304)

    same = gpuspan.diff(base, base, max_increase="5%")
    assert same.passed and same.exit_code == 0 and bool(same)

    result = gpuspan.diff(base, new, max_increase="5%")
    assert not result.passed and result.exit_code == 1 and not bool(result)
    assert [(row["phase"], row["device"], row["compared"]) for row in result.rows] == [
        ("step", "all", 6),
        ("epoch", "all", 2),
    ]
    for row in result.rows:
        peak = row["figures"][0]
        assert peak["figure"] == "peak"
        assert (peak["base"], peak["new"], peak["change"]) == (2048 * MIB, 2304 * MIB, 256 * MIB)
        assert peak["percent"] == 12.5 and peak["limit"] == "5%" and peak["past_limit"]
    assert [(row["phase"], f["figure"]) for row, f in result.regressions] == [
        ("step", "peak"),
        ("epoch", "peak"),
    ]
    assert result.new["worst"]["phase"] == "step"
    assert result.new["worst"]["peak"] == 2304 * MIB
    assert len(result.new["worst"]["trace_id"]) == 32

    # The same outcome as the command's, in every form.
    command = Path(sys.executable).with_name("gpuspan")
    args = [str(command), "diff", str(base), str(new), "--max-increase", "5%"]
    table = subprocess.run(args, capture_output=True, text=True)
    assert table.returncode == 1
    assert repr(result) == table.stdout == result.table()
    as_json = subprocess.run([*args, "--json"], capture_output=True, text=True)
    assert json.loads(as_json.stdout) == result.to_dict()
    markdown = subprocess.run([*args, "--markdown"], capture_output=True, text=True)
    assert markdown.stdout == result.markdown()
    html = result._repr_html_()
    assert html.startswith("<p><b>gpuspan diff: 2 figures past the limit</b></p>")
    assert "<td style=\"color:#c00;font-weight:bold\">+256 MiB (+12.5 %)</td>" in html

    # Limits by figure, and a list of limits.
    assert gpuspan.diff(base, new, max_increase=["growth=0B", "peak=256MiB"]).passed


def test_bad_input_raises_value_error_with_the_command_s_message(tmp_path, fake_nvml):
    base = record(tmp_path, fake_nvml, "base", 2048)
    with pytest.raises(ValueError, match="cannot read .*nowhere: No such file or directory"):
        gpuspan.diff(base, tmp_path / "nowhere")
    with pytest.raises(ValueError, match='--max-increase "5": "5" is neither a percentage'):
        gpuspan.diff(base, base, max_increase="5")
