"""Every row of the crate's settings table is a keyword of ``gpuspan.init()`` (the stub
says so too, and both docstrings give each its row's variable, doc and default), and text
is read with the grammar of the row's variable."""

import ast
import inspect
from datetime import timedelta
from pathlib import Path

import pytest

import gpuspan
from gpuspan import _native

# A value of each setting's Python type; a new setting needs one here.
SAMPLES = {
    "disabled": False,
    "service_name": "resnet",
    "resource_attributes": {"team": "ml"},
    "sample_interval": "2ms",
    "power_interval": "50ms",
    "nvml_lib": "/usr/lib/libnvidia-ml.so.1",
    "devices": [0, "GPU-1"],
    "sysfs_root": "/sys",
    "procfs_root": "/proc",
    "run_dir": "runs",
    "run_id": "resnet-lr0.1",
    "job_id": "job-7",
    "endpoint": "http://localhost:4318",
    "protocol": "grpc",
    "headers": {"x-team": "ml"},
    "timeout": timedelta(seconds=2),
    "compression": "gzip",
    "certificate": "/etc/otel/ca.pem",
    "client_certificate": "/etc/otel/client.pem",
    "client_key": "/etc/otel/client.key",
    "insecure": False,
    "traces_exporter": "run_dir",
    "metrics_exporter": "none",
    "metric_export_interval": 30,
    "prometheus_addr": 9464,
    "export_queue": 8192,
    "summary": False,
    "flush_on_signal": True,
    "timeline": "on",
    "tensorboard": True,
    "memory_budget": "20GiB",
    "memory_budget_error": "yes",
    "memory_budget_stop": "off",
    "memory_forecast_stop": "off",
    "leak_ratio": 1.5,
    "leak_warmup": 2,
    "near_oom_threshold": "90%",
    "near_oom_window": "30s",
}


def stub_init():
    stub = Path(gpuspan.__file__).with_name("__init__.pyi")
    tree = ast.parse(stub.read_text())
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "init")


def stub_keywords():
    return [arg.arg for arg in stub_init().args.kwonlyargs]


def keyword_entries(doc):
    """The entries of a docstring's list of keywords, each with its lines joined."""
    return [" ".join(entry.split()) for entry in inspect.cleandoc(doc).split("\n- ")[1:]]


def test_the_stub_lists_every_setting_and_the_allocator():
    assert sorted(stub_keywords()) == sorted([*_native.SETTINGS, "allocator"])


def test_init_and_its_stub_give_each_keyword_its_row_s_variable_doc_and_default():
    rows = [
        f"{name} ({variable}): {doc} Default: {default}." if variable
        else f"{name}: {doc} Default: {default}."
        for name, variable, doc, default in _native.SETTING_DOCS
    ]
    assert [row.split(" ")[0].rstrip(":") for row in rows] == list(_native.SETTINGS)
    assert keyword_entries(gpuspan.init.__doc__) == rows
    assert keyword_entries(ast.get_docstring(stub_init())) == rows


@pytest.mark.parametrize("name", _native.SETTINGS)
def test_every_setting_is_taken_as_a_keyword(name):
    _native.check_settings({name: SAMPLES[name]})


@pytest.mark.parametrize(
    "settings, words",
    [
        ({"timeline": "maybe"}, ["timeline", "'maybe'", "on or off", "true or false"]),
        ({"sample_interval": "5 parsecs"}, ["sample_interval", "5ms"]),
        ({"traces_exporter": "file"}, ["traces_exporter", "run_dir"]),
        ({"near_oom_threshold": "120%"}, ["near_oom_threshold", "95%"]),
        ({"memory_budget": "20"}, ["memory_budget", "20GiB"]),
    ],
)
def test_text_is_read_with_the_variables_grammar(settings, words):
    with pytest.raises(ValueError) as error:
        _native.check_settings(settings)
    for word in words:
        assert word in str(error.value), str(error.value)
