"""`Trainer.fit` with `gpuspan.lightning.GpuspanCallback`: an `epoch` span per epoch, a
`step` span per optimizer step under it (`ml.step` = `trainer.global_step` as the step
begins), a `validation` span per validation loop under its epoch and one `sanity_check`
span, each with the memory the fake device was scripted with while it was open."""

from conftest import run_python
from frameworks import PRELUDE, by_start, framework_env, memory, parent, three_epochs

SCRIPT = (
    PRELUDE
    + """
import lightning.pytorch as pl

from gpuspan import _claim
from gpuspan.lightning import GpuspanCallback

BASE = 1000
owners = set()


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        owners.add(_claim.owner())
        use(2000 + self.global_step)  # this step's own peak
        use(BASE)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        use(3000 + self.current_epoch)
        use(BASE)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


use(BASE, wait=False)  # gpuspan starts (and starts sampling) at the trainer's first hook
trainer = pl.Trainer(
    max_epochs=3,
    accelerator="cpu",
    devices=1,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    callbacks=[GpuspanCallback()],
)
loader = torch.utils.data.DataLoader(dataset(20), batch_size=2)
val_loader = torch.utils.data.DataLoader(dataset(4, seed=1), batch_size=2)
trainer.fit(Model(), loader, val_loader)
print("owners during training:", sorted(owners, key=str), "after:", _claim.owner())
"""
)


def test_fit_gets_its_spans(tmp_path, fake_nvml):
    proc = run_python(SCRIPT, tmp_path, framework_env(fake_nvml))
    assert "owners during training: ['lightning'] after: None" in proc.stdout

    spans, epochs, steps = three_epochs(tmp_path, lambda e: list(range(10 * e, 10 * e + 10)))
    assert len(steps) == 30
    assert [memory(epoch) for epoch in epochs] == [(1000, 3000 + e, 1000) for e in range(3)]
    for step in steps:
        assert memory(step) == (1000, 2000 + step["attributes"]["ml.step"], 1000)
        assert step["attributes"]["gpu.memory.source"] == "nvml"
        assert step["status"].get("code", 0) != 2

    validations = by_start(spans, "validation")
    assert [parent(v) for v in validations] == [e["spanId"] for e in epochs]
    assert [memory(v) for v in validations] == [(1000, 3000 + e, 1000) for e in range(3)]

    (sanity,) = by_start(spans, "sanity_check")
    assert parent(sanity) is None
    assert memory(sanity) == (1000, 3000, 1000)
    assert int(sanity["endTimeUnixNano"]) <= int(epochs[0]["startTimeUnixNano"])
