"""``gpuspan.report(run_dir)``: a run directory's per-epoch table, and on a job's directory
the job's table across its ranks, for a terminal (``repr``) and for Jupyter
(``_repr_html_``)."""

import html
import os

from . import _native

_MIB = 1024 * 1024


class Report:
    """The runs read from a run directory: ``runs`` is a list of
    ``(path, table, source, epochs)``, ``epochs`` one dict per epoch. On a job of several
    ranks, ``job`` holds the job's figures, as ``gpuspan report`` prints them: ``ranks``,
    ``epochs`` (per epoch ``worst_rank``, ``worst_peak``, ``lowest_peak``, ``skew``,
    ``slowest_rank``, ``slowest_seconds``), ``steps``, ``first_oom`` (the rank first out of
    memory) and ``first_forecast`` (the rank first forecast to run out of memory), lines or
    ``None``, and ``table``; else ``None``."""

    def __init__(self, runs, job=None):
        self.runs = runs
        self.job = job

    @property
    def epochs(self):
        """The epoch rows of every run, in order."""
        return [row for _, _, _, rows in self.runs for row in rows]

    def __repr__(self):
        text = "\n".join(f"{path}\n{table}" for path, table, _, _ in self.runs)
        return text + (self.job["table"] if self.job else "")

    def _repr_html_(self):
        parts = []
        for path, _, source, rows in self.runs:
            gpu = any("gpu_peak" in row for row in rows)
            head = ["epoch", "seconds", "steps"]
            if gpu:
                head += ["GPU start (MiB)", "GPU peak (MiB)", "GPU end (MiB)"]
            head += ["host peak (MiB)", ""]
            lines = [
                f"<p><code>{html.escape(path)}</code>"
                + (f" (GPU memory from {html.escape(source)})" if source else "")
                + "</p>",
                "<table><thead><tr>"
                + "".join(f"<th>{html.escape(h)}</th>" for h in head)
                + "</tr></thead><tbody>",
            ]
            for row in rows:
                cells = [str(row["epoch"]), f"{row['seconds']:.2f}", str(row["steps"])]
                if gpu:
                    cells += [_mib(row.get(k)) for k in ("gpu_start", "gpu_peak", "gpu_end")]
                cells += [_mib(row.get("host_peak")), row.get("error", "")]
                lines.append(
                    "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"
                )
            lines.append("</tbody></table>")
            parts.append("\n".join(lines))
        if self.job:
            parts.append(_job_html(self.job))
        return "\n".join(parts)


def _job_html(job):
    head = ["epoch", "worst rank", "worst peak (MiB)", "lowest peak (MiB)", "skew",
            "slowest rank", "slowest (s)"]
    lines = [
        f"<p>job of {len(job['ranks'])} ranks</p>",
        "<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head)
        + "</tr></thead><tbody>",
    ]
    for row in job["epochs"]:
        skew = row["skew"]
        cells = [
            str(row["epoch"]),
            row["worst_rank"] or "-",
            _mib(row["worst_peak"]),
            _mib(row["lowest_peak"]),
            "-" if skew is None else f"{100 * skew:.1f} %",
            row["slowest_rank"],
            f"{row['slowest_seconds']:.2f}",
        ]
        lines.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    lines.append("</tbody></table>")
    for line in (job["steps"], job["first_oom"], job["first_forecast"]):
        if line:
            lines.append(f"<p>{html.escape(line)}</p>")
    return "\n".join(lines)


def _mib(value):
    return "-" if value is None else f"{value / _MIB:.0f}"


def report(run_dir=None):
    """Reads a run directory (or the newest run in a directory of runs; default
    ``$GPUSPAN_RUN_DIR`` or ``gpuspan-runs``, as the crate reads them). Raises ``ValueError``
    naming the directory when it holds no run."""
    if run_dir is None:
        run_dir = _native.run_root()
    runs, job = _native.read_run(os.fspath(run_dir))
    return Report(runs, job)
