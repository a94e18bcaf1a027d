"""Reads every scalar in a directory's TensorBoard event files with tensorboard's own
reader and prints {tag: [[step, value, wall_time], ...]} as JSON."""
import json
import sys

from tensorboard.backend.event_processing import event_accumulator

accumulator = event_accumulator.EventAccumulator(
    sys.argv[1], size_guidance={event_accumulator.SCALARS: 0}
)
accumulator.Reload()
print(json.dumps({
    tag: [[e.step, e.value, e.wall_time] for e in accumulator.Scalars(tag)]
    for tag in accumulator.Tags()["scalars"]
}))
