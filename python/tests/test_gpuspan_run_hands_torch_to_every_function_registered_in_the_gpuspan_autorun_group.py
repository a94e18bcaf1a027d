"""`gpuspan run`'s bootstrap finds what to do with torch, Lightning and the Transformers
Trainer through the entry point group `gpuspan.autorun`, not by a package's name: the
installed gpuspan package registers its function there, and a package of one's own that
registers one is handed the module too, once the program has imported it. A function that
cannot be imported, or that fails, costs one warning line: the program trains and exits as
it would alone, and gpuspan's step spans still come."""

import sys
import textwrap
from importlib.metadata import entry_points

import pytest
from conftest import TORCH_ONLY, clean_env, gpuspan_run, read_spans

GROUP = "gpuspan.autorun"

SAYS_WHAT_IT_GOT = """
import sys

def arrived(name, module):
    print(f"mine: {name} {module.__name__} {hasattr(module, 'optim')}", file=sys.stderr)
"""

FAILS = """
def arrived(name, module):
    raise RuntimeError("no room for it")
"""


def test_the_installed_package_registers_its_function_in_the_group():
    from gpuspan import _autorun

    found = entry_points(group=GROUP)
    assert [(e.name, e.value, e.dist.name) for e in found] == [
        ("gpuspan", "gpuspan._autorun:arrived", "gpuspan")
    ]
    assert found["gpuspan"].load() is _autorun.arrived


def package_of_one_s_own(tmp_path, source, registered="myhooks:arrived"):
    """A directory, for PYTHONPATH, holding the distribution `myhooks` (its module's code
    is `source`), which registers `registered` in the group."""
    site = tmp_path / "own"
    metadata = site / "myhooks-1.0.dist-info"
    metadata.mkdir(parents=True)
    (metadata / "METADATA").write_text("Metadata-Version: 2.1\nName: myhooks\nVersion: 1.0\n")
    (metadata / "entry_points.txt").write_text(f"[{GROUP}]\nmine = {registered}\n")
    (site / "myhooks.py").write_text(textwrap.dedent(source))
    return site


def train_under_gpuspan_run(tmp_path, fake_nvml, site):
    """TORCH_ONLY under `gpuspan run` with `site` on the path: (process, span names)."""
    (tmp_path / "train.py").write_text(textwrap.dedent(TORCH_ONLY))
    env = clean_env(GPUSPAN_NVML_LIB=fake_nvml, GPUSPAN_RUN_ID="r", PYTHONPATH=site)
    proc = gpuspan_run([sys.executable, "train.py"], tmp_path, env)
    assert proc.returncode == 5, proc.stderr
    assert proc.stdout.startswith("trained "), proc.stdout
    spans = read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")
    return proc, sorted(s["name"] for s in spans)


def test_a_function_of_one_s_own_in_the_group_is_handed_torch_beside_gpuspan_s(tmp_path, fake_nvml):
    site = package_of_one_s_own(tmp_path, SAYS_WHAT_IT_GOT)
    proc, names = train_under_gpuspan_run(tmp_path, fake_nvml, site)
    assert [line for line in proc.stderr.splitlines() if line.startswith("mine:")] == [
        "mine: torch torch True"
    ], proc.stderr
    assert "warning" not in proc.stderr
    assert names == ["run", "step", "step", "step"]


@pytest.mark.parametrize(
    ("source", "registered", "warning"),
    [
        (
            SAYS_WHAT_IT_GOT,
            "myhooks_gone:arrived",
            f"gpuspan: warning: torch was imported, but myhooks_gone:arrived (registered in {GROUP}) "
            f"cannot be imported by {sys.executable} (ModuleNotFoundError: No module named "
            "'myhooks_gone'); the program runs on without it",
        ),
        (
            FAILS,
            "myhooks:arrived",
            "gpuspan: warning: instrumenting torch with myhooks:arrived failed (RuntimeError: no "
            "room for it); the program runs on without it",
        ),
    ],
    ids=["cannot be imported", "fails"],
)
def test_a_function_in_the_group_that_breaks_costs_one_warning_line_and_nothing_else(
    tmp_path, fake_nvml, source, registered, warning
):
    site = package_of_one_s_own(tmp_path, source, registered)
    proc, names = train_under_gpuspan_run(tmp_path, fake_nvml, site)
    assert [line for line in proc.stderr.splitlines() if "warning" in line] == [warning]
    assert names == ["run", "step", "step", "step"]
