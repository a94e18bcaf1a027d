"""`Trainer.train` with `gpuspan.transformers.GpuspanCallback`, a tiny randomly initialised
BERT, gradient accumulation and an evaluation each epoch: an `epoch` span per epoch
(`ml.epoch` its index), a `step` span per optimizer step under it with `ml.step` =
`state.global_step` after the step, and an `evaluation` span per evaluation, each with
the memory the fake device was scripted with while it was open."""

from conftest import run_python
from frameworks import PRELUDE, TOKENS, by_start, framework_env, memory, three_epochs

SCRIPT = (
    PRELUDE
    + """
from transformers import Trainer, TrainerCallback, TrainingArguments

from gpuspan import _claim
from gpuspan.transformers import GpuspanCallback

"""
    + TOKENS
    + """


class Counts(TrainerCallback):
    # What the Trainer itself counts, and who owns the step spans meanwhile; and the
    # memory an evaluation takes.
    global_steps, owners = [], set()

    def on_step_end(self, args, state, control, **kwargs):
        self.global_steps.append(state.global_step)
        self.owners.add(_claim.owner())

    def on_prediction_step(self, args, state, control, **kwargs):
        use(4000)  # an evaluation batch's peak
        use(1500)


use(1500, wait=False)
args = TrainingArguments(
    output_dir="out",
    num_train_epochs=3,
    per_device_train_batch_size=2,
    per_device_eval_batch_size=2,
    gradient_accumulation_steps=2,
    eval_strategy="epoch",
    save_strategy="no",
    logging_strategy="no",
    report_to=[],
    use_cpu=True,
    disable_tqdm=True,
)
trainer = Trainer(
    model=tiny_bert(),
    args=args,
    train_dataset=Tokens(10),
    eval_dataset=Tokens(4),
    callbacks=[GpuspanCallback(), Counts()],
)
trainer.train()
print("global steps:", Counts.global_steps)
print("owners during training:", sorted(Counts.owners, key=str), "after:", _claim.owner())
"""
)


def test_training_gets_its_spans(tmp_path, fake_nvml):
    proc = run_python(SCRIPT, tmp_path, framework_env(fake_nvml))
    # 10 samples in batches of 2, two batches a step: 3 optimizer steps an epoch.
    assert "global steps: [1, 2, 3, 4, 5, 6, 7, 8, 9]" in proc.stdout
    assert "owners during training: ['transformers'] after: None" in proc.stdout

    spans, epochs, steps = three_epochs(tmp_path, lambda e: [3 * e + 1, 3 * e + 2, 3 * e + 3])
    assert len(steps) == 9
    for span in steps + epochs:
        assert memory(span) == (1500, 1500, 1500)

    # The Trainer evaluates after each epoch has ended.
    evaluations = by_start(spans, "evaluation")
    assert len(evaluations) == 3
    for epoch, evaluation in zip(epochs, evaluations):
        assert int(evaluation["startTimeUnixNano"]) >= int(epoch["endTimeUnixNano"])
        assert memory(evaluation) == (1500, 4000, 1500)
