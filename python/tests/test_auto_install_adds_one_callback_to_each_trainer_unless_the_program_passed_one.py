"""What `gpuspan run`'s bootstrap does once a framework is imported: `_auto_install` makes
every Trainer made afterwards get exactly one GpuspanCallback, none more when the program
passed its own, and the auto-added one records the training."""

from conftest import read_spans, run_python
from frameworks import LIGHTNING_MODEL, PRELUDE, by_start, framework_env

LIGHTNING = (
    PRELUDE
    + """
import lightning
import lightning.pytorch as pl

from gpuspan import lightning as gl

gl._auto_install(lightning)
gl._auto_install(lightning)  # a second call changes nothing


def ours(trainer):
    return [c for c in trainer.callbacks if isinstance(c, gl._Hooks)]


quiet = dict(logger=False, enable_progress_bar=False, enable_model_summary=False)
auto = pl.Trainer(max_epochs=1, accelerator="cpu", **quiet)
(added,) = ours(auto)
print("auto:", type(added).__name__, "last:", type(auto.callbacks[-1]).__name__)
mine = gl.GpuspanCallback()
for passed in ([mine], mine):
    assert ours(pl.Trainer(callbacks=passed, **quiet)) == [mine]
print("passed: mine only")

"""
    + LIGHTNING_MODEL
    + """


auto.fit(Model(), torch.utils.data.DataLoader(dataset(6), batch_size=2))
"""
)

TRANSFORMERS = (
    PRELUDE
    + """
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from gpuspan import transformers as gt

gt._auto_install(transformers)
gt._auto_install(transformers)


def ours(trainer):
    return [c for c in trainer.callback_handler.callbacks if isinstance(c, gt.GpuspanCallback)]


class Tokens(torch.utils.data.Dataset):
    ids = torch.randint(0, 50, (4, 8), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


config = GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=16)
args = TrainingArguments(
    output_dir="out", num_train_epochs=1, per_device_train_batch_size=2, save_strategy="no",
    logging_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
)
auto = Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=Tokens())
print("auto:", len(ours(auto)))
mine = gt.GpuspanCallback()
assert ours(Trainer(model=GPT2LMHeadModel(config), args=args, callbacks=[mine])) == [mine]
print("passed: mine only")
auto.train()
"""
)


def test_a_lightning_trainer_gets_one(tmp_path, fake_nvml):
    proc = run_python(LIGHTNING, tmp_path, framework_env(fake_nvml))
    # Lightning keeps checkpointing the last callback to run.
    assert "auto: GpuspanCallback last: ModelCheckpoint" in proc.stdout
    assert "passed: mine only" in proc.stdout
    spans = read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")
    assert [s["attributes"]["ml.step"] for s in by_start(spans, "step")] == [0, 1, 2]
    assert len(by_start(spans, "epoch")) == 1


def test_a_transformers_trainer_gets_one(tmp_path, fake_nvml):
    proc = run_python(TRANSFORMERS, tmp_path, framework_env(fake_nvml))
    assert "auto: 1" in proc.stdout
    assert "passed: mine only" in proc.stdout
    spans = read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")
    assert [s["attributes"]["ml.step"] for s in by_start(spans, "step")] == [1, 2]
    assert len(by_start(spans, "epoch")) == 1
