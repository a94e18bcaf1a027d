"""A Ctrl-C can land at any bytecode. When it lands in the work gpuspan does as an epoch
ends (the optimizer hooks closing the step they opened ahead), the epoch must still end,
be exported with the interruption as its error, and stop being the current span, so the
spans the program opens afterwards are not its children."""

from conftest import clean_env, read_spans, run_python

SCRIPT = """
import gpuspan

telemetry = gpuspan.init(run_id="r")


def interrupted(span, error):
    raise KeyboardInterrupt


try:
    with gpuspan.epoch(0):
        gpuspan._before_end = interrupted
except KeyboardInterrupt:
    print("interrupted")
gpuspan._before_end = None
with gpuspan.epoch(1):
    pass
telemetry.shutdown()
"""


def test_the_epoch_ends_with_the_interruption_and_the_next_epoch_is_not_its_child(tmp_path):
    proc = run_python(SCRIPT, cwd=tmp_path, env=clean_env())
    assert "interrupted" in proc.stdout, proc.stderr
    spans = {s["name"] + str(s["attributes"].get("ml.epoch")): s
             for s in read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")}
    assert set(spans) == {"epoch0", "epoch1"}, spans.keys()
    first, second = spans["epoch0"], spans["epoch1"]
    assert first["status"].get("code") == 2, first["status"]
    assert "KeyboardInterrupt" in first["status"].get("message", ""), first["status"]
    assert second.get("parentSpanId", "") in ("", first.get("parentSpanId", "")), (
        "the epoch opened after the interrupted one is its child"
    )
