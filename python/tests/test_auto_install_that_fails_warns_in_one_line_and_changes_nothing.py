"""`_auto_install` runs inside the program under `gpuspan run`: when it cannot do its work
it prints one warning line each time and the program goes on as it would without gpuspan."""

from conftest import clean_env, run_python

SCRIPT = """
import sys
import types

from gpuspan import lightning as gl

gl._auto_install(types.ModuleType("pytorch_lightning"))  # no Trainer in it

import transformers

sys.modules["transformers.trainer"] = None  # importing the Trainer fails
from gpuspan import transformers as gt

gt._auto_install(transformers)
print("still running")
"""


def test_a_failed_install_warns(tmp_path):
    proc = run_python(SCRIPT, tmp_path, clean_env(HF_HUB_OFFLINE=1))
    assert proc.stdout == "still running\n"
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("gpuspan:")]
    assert len(warnings) == 2
    assert warnings[0].startswith("gpuspan: warning: could not add the Lightning callback: ")
    assert warnings[1].startswith("gpuspan: warning: could not add the Transformers callback: ")
