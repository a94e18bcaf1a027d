"""``gpuspan.diff(base, new)``: two runs compared as ``gpuspan diff`` compares them, as an
object: its figures as the command's JSON gives them, and the table for a terminal
(``repr``), Markdown and HTML (``_repr_html_``)."""

import json
import os

from . import _native


class Diff:
    """The outcome of ``gpuspan.diff``. ``passed`` is whether no figure grew past its limit
    and ``exit_code`` what ``gpuspan diff`` exits with (0 or 1); ``rows`` holds a dict per
    row both runs have (``rank``, ``phase``, ``device``, ``compared``, ``figures``...),
    ``base`` and ``new`` each run's path, ranks and worst step, ``only_base`` and
    ``only_new`` what one run alone has: the fields of ``gpuspan diff --json``
    (docs/diff.md)."""

    def __init__(self, outcome):
        text, self._table, self._markdown, self._html, self.exit_code = outcome
        self._dict = json.loads(text)
        self.passed = self._dict["passed"]
        self.base = self._dict["base"]
        self.new = self._dict["new"]
        self.rows = self._dict["rows"]
        self.only_base = self._dict["only_base"]
        self.only_new = self._dict["only_new"]

    @property
    def regressions(self):
        """``(row, figure)`` for each figure past its limit."""
        return [(row, f) for row in self.rows for f in row["figures"] if f["past_limit"]]

    def to_dict(self):
        """The outcome as ``gpuspan diff --json`` prints it, as a dict."""
        return json.loads(json.dumps(self._dict))

    def table(self):
        """The table ``gpuspan diff`` prints."""
        return self._table

    def markdown(self):
        """The Markdown ``gpuspan diff --markdown`` prints, for a pull request's comment."""
        return self._markdown

    def __bool__(self):
        return self.passed

    def __repr__(self):
        return self._table

    def _repr_html_(self):
        return self._html


def diff(base, new, max_increase=None):
    """Compares two runs (run directories, job directories or OTLP/JSON traces files) by
    rank, span name, device, epoch and ``ml.step``, as ``gpuspan diff BASE NEW`` does.

    ``max_increase`` is a limit (``"5%"``, ``"512MiB"``, ``"peak=5%,growth=256MiB"``) or a
    list of them; without one the comparison only reports. Raises ``ValueError`` on bad
    input, with the message ``gpuspan diff`` prints."""
    if max_increase is None:
        limits = []
    elif isinstance(max_increase, str):
        limits = [max_increase]
    else:
        limits = list(max_increase)
    return Diff(_native.diff(os.fspath(base), os.fspath(new), limits))
