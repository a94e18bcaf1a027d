"""A setting that does not parse, from the environment or a keyword, is a Python
exception whose message names it and its value; gpuspan is set up once per process."""

import pytest
from conftest import clean_env, run_python


def outcome(tmp_path, code, **env):
    script = f"""
import gpuspan
try:
    {code}
except Exception as error:
    print(type(error).__name__ + ": " + str(error))
else:
    print("no error")
"""
    return run_python(script, tmp_path, clean_env(**env)).stdout.strip()


def test_a_bad_environment_variable_is_a_value_error_naming_it(tmp_path):
    out = outcome(tmp_path, "gpuspan.init()", GPUSPAN_SAMPLE_INTERVAL="fast")
    assert out.startswith("ValueError: ")
    assert "GPUSPAN_SAMPLE_INTERVAL" in out and '"fast"' in out


def test_a_bad_standard_variable_is_a_value_error_naming_it(tmp_path):
    out = outcome(tmp_path, "gpuspan.init()", OTEL_METRIC_EXPORT_INTERVAL="soon")
    assert out.startswith("ValueError: ")
    assert "OTEL_METRIC_EXPORT_INTERVAL" in out and "soon" in out


@pytest.mark.parametrize(
    "call, words",
    [
        ('gpuspan.init(sample_interval="fast")', ["sample_interval", "'fast'", "5ms"]),
        ('gpuspan.init(protocol="udp")', ["protocol", "'udp'", "grpc"]),
        ("gpuspan.init(run_id=7)", ["run_id", "7"]),
        ('gpuspan.init(traces_exporter="file")', ["traces_exporter", "'file'", "console"]),
    ],
)
def test_a_bad_keyword_value_is_a_value_error_naming_it(tmp_path, call, words):
    out = outcome(tmp_path, call)
    assert out.startswith("ValueError: gpuspan.init("), out
    for word in words:
        assert word in out, out


def test_the_budget_stop_without_a_budget_is_a_value_error_naming_the_fix(tmp_path):
    out = outcome(tmp_path, "gpuspan.init(memory_budget_stop=True)")
    assert out.startswith("ValueError: "), out
    assert "memory_budget_stop" in out and "set GPUSPAN_MEMORY_BUDGET" in out, out


def test_an_unknown_keyword_is_a_type_error_listing_the_settings(tmp_path):
    out = outcome(tmp_path, "gpuspan.init(sample_intervall='5ms')")
    assert out.startswith("TypeError: "), out
    assert "sample_intervall" in out and "sample_interval," in out


def test_an_allocator_without_the_methods_is_a_type_error(tmp_path):
    out = outcome(tmp_path, "gpuspan.init(allocator='torch')")
    assert out.startswith("TypeError: ") and "read() and reset_peak()" in out, out


def test_a_second_init_is_a_runtime_error(tmp_path):
    out = outcome(tmp_path, "gpuspan.init(traces_exporter='none', metrics_exporter='none'); gpuspan.init()")
    assert out.startswith("RuntimeError: gpuspan is already set up in this process"), out
    assert "call gpuspan.init() once" in out
