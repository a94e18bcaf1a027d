"""With `accumulate_grad_batches`, Lightning's callback opens one `step` span per optimizer
step, covering all the batches accumulated for it (the last, shorter group of an epoch
included), and `ml.step` counts optimizer steps as `trainer.global_step` does."""

from conftest import read_spans, run_python
from frameworks import LIGHTNING_FIT, by_start, framework_env

SCRIPT = (
    LIGHTNING_FIT
    + """

class Scripted(Model):
    def training_step(self, batch, batch_idx):
        use(2000 + batch_idx)  # the peak of the step says which batches it covered
        use(1000)
        return super().training_step(batch, batch_idx)


use(1000, wait=False)
trainer = pl.Trainer(
    max_epochs=2, accumulate_grad_batches=4, accelerator="cpu", logger=False,
    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    callbacks=[GpuspanCallback()],
)
trainer.fit(Scripted(), torch.utils.data.DataLoader(dataset(20), batch_size=2))
print("global_step:", trainer.global_step)
"""
)


def test_one_step_span_per_optimizer_step(tmp_path, fake_nvml):
    proc = run_python(SCRIPT, tmp_path, framework_env(fake_nvml))
    # 10 batches an epoch in groups of 4, 4 and 2.
    assert "global_step: 6" in proc.stdout
    steps = by_start(read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl"), "step")
    assert [s["attributes"]["ml.step"] for s in steps] == [0, 1, 2, 3, 4, 5]
    peaks = [s["attributes"]["gpu.memory.peak"] // (1024 * 1024) for s in steps]
    assert peaks == [2003, 2007, 2009] * 2
