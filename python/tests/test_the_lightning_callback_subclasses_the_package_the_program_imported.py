"""`gpuspan.lightning.GpuspanCallback` is a callback of the Lightning package the program
uses, the older `pytorch_lightning` included, and `import gpuspan` (or
`gpuspan.lightning`) imports no framework."""

from conftest import clean_env, read_spans, run_python
from frameworks import LIGHTNING_MODEL, PRELUDE, by_start, framework_env

OLD_PACKAGE = (
    PRELUDE
    + """
import pytorch_lightning as pl

from gpuspan import lightning as gl

print("subclass:", issubclass(gl.GpuspanCallback, pl.Callback))
gl._auto_install(pl)

"""
    + LIGHTNING_MODEL
    + """


trainer = pl.Trainer(
    max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
    enable_progress_bar=False, enable_model_summary=False,
)
trainer.fit(Model(), torch.utils.data.DataLoader(dataset(4), batch_size=2))
"""
)


def test_pytorch_lightning_gets_its_own(tmp_path, fake_nvml):
    proc = run_python(OLD_PACKAGE, tmp_path, framework_env(fake_nvml))
    assert "subclass: True" in proc.stdout
    spans = read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")
    assert [s["attributes"]["ml.step"] for s in by_start(spans, "step")] == [0, 1]


def test_importing_gpuspan_imports_no_framework(tmp_path):
    script = """
import sys
import gpuspan
import gpuspan.lightning
print(sorted(m for m in ("lightning", "pytorch_lightning", "transformers", "torch") if m in sys.modules))
"""
    assert run_python(script, tmp_path, clean_env()).stdout == "[]\n"
