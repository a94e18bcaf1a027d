"""When training fails, the callbacks end the spans still open (the step, its epoch) with
the error instead of losing them, report an out-of-memory error to `gpuspan.record_oom`
while they are open, and give the step spans back."""

from conftest import read_spans, run_python
from frameworks import LIGHTNING_MODEL, PRELUDE, by_start, framework_env

# Stands in for gpuspan.record_oom: says which spans were still open when it was called.
RECORDER = """
import gpuspan

reported = []
gpuspan.record_oom = lambda message: reported.append((message, gpuspan._current.get() is not None))
OOM = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
"""

LIGHTNING = (
    PRELUDE
    + RECORDER
    + """
import lightning.pytorch as pl

from gpuspan import _claim
from gpuspan.lightning import GpuspanCallback

"""
    + LIGHTNING_MODEL
    + """

class Failing(Model):
    def training_step(self, batch, batch_idx):
        if self.global_step == 2:
            raise OOM
        return super().training_step(batch, batch_idx)


trainer = pl.Trainer(
    max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
    enable_progress_bar=False, enable_model_summary=False, callbacks=[GpuspanCallback()],
)
try:
    trainer.fit(Failing(), torch.utils.data.DataLoader(dataset(8), batch_size=2))
except torch.cuda.OutOfMemoryError:
    print("raised")
print("reported:", reported, "owner:", _claim.owner())
"""
)

TRANSFORMERS = (
    PRELUDE
    + RECORDER
    + """
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from gpuspan import _claim
from gpuspan.transformers import GpuspanCallback


class Tokens(torch.utils.data.Dataset):
    ids = torch.randint(0, 50, (8, 8), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Failing(Trainer):
    def compute_loss(self, model, inputs, *args, **kwargs):
        if self.state.global_step == 2:
            raise OOM
        return super().compute_loss(model, inputs, *args, **kwargs)


config = GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=16)
args = TrainingArguments(
    output_dir="out", num_train_epochs=1, per_device_train_batch_size=2, save_strategy="no",
    logging_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
)
trainer = Failing(
    model=GPT2LMHeadModel(config), args=args, train_dataset=Tokens(), callbacks=[GpuspanCallback()]
)
try:
    trainer.train()
except torch.cuda.OutOfMemoryError:
    print("raised")
print("reported:", reported, "owner:", _claim.owner())
"""
)

MESSAGE = "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def check(proc, spans, failed_step):
    assert "raised" in proc.stdout
    assert f"reported: [({MESSAGE!r}, True)] owner: None" in proc.stdout
    steps = by_start(spans, "step")
    assert [s["attributes"]["ml.step"] for s in steps][-1] == failed_step
    (epoch,) = by_start(spans, "epoch")
    for span in (steps[-1], epoch):
        assert span["status"]["code"] == 2
        assert span["status"]["message"] == MESSAGE
    assert all(s["status"].get("code", 0) != 2 for s in steps[:-1])


def test_a_failing_lightning_fit(tmp_path, fake_nvml):
    proc = run_python(LIGHTNING, tmp_path, framework_env(fake_nvml))
    check(proc, read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl"), failed_step=2)


def test_a_failing_transformers_training(tmp_path, fake_nvml):
    proc = run_python(TRANSFORMERS, tmp_path, framework_env(fake_nvml))
    check(proc, read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl"), failed_step=3)
