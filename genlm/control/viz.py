"""`InferenceVisualizer`: an SMC run record rendered as one self-contained HTML page.

The page needs no server and no network: every step is rendered as a table of
particles (text, log weight, normalized weight as a bar, done flag, ancestor after
resampling), and a few lines of inline script page through the steps.

A record is input like any other: it is checked field by field before rendering
(`RunRecord.validate`: a field of the wrong type is a `ValueError` naming it), every
value placed into the page is HTML-escaped, and the one inline script is a constant
that carries no data from the record.

Example:
    ```python
    from genlm.control import InferenceVisualizer
    sequences = await sampler.smc(n_particles=10, ess_threshold=0.5, max_tokens=20,
                                  json_path="smc_record.json")
    viz = InferenceVisualizer()
    url = viz.visualize("smc_record.json")      # writes smc_record.html, returns its URL
    InferenceVisualizer("smc_record.json").to_html("run.html")
    ```
"""

from __future__ import annotations

import html
import math
import shutil
import tempfile
import webbrowser
from pathlib import Path
from typing import Any

import numpy as np

from genlm.control.sampler.record import RunRecord, StepRecord
from genlm.control.sampler.record_file import write_text_atomically
from genlm.control.sampler.resampling import normalized_weights

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em} .meta{color:#555;font-size:.9em}
nav{margin:1em 0} nav button{margin-right:.4em}
table{border-collapse:collapse;width:100%;font-size:.9em}
td,th{border-bottom:1px solid #eee;padding:.2em .5em;text-align:left;vertical-align:top}
td.num{text-align:right;font-family:monospace;white-space:nowrap}
td.text{font-family:monospace;white-space:pre-wrap;word-break:break-all}
.tok{border-right:1px dotted #bbb} .eos{color:#a33;font-weight:bold}
.bar{background:#4a7;height:.8em;display:inline-block}
tr.done td.text{color:#036} tr.dead td{color:#aaa}
.step{display:none} .step.shown{display:block}
"""

_SCRIPT = """
const steps=[...document.querySelectorAll('.step')];let k=steps.length-1;
function show(i){k=Math.max(0,Math.min(steps.length-1,i));
steps.forEach((s,j)=>s.classList.toggle('shown',j===k));
document.getElementById('pos').textContent=(k+1)+' / '+steps.length;}
document.getElementById('prev').onclick=()=>show(k-1);
document.getElementById('next').onclick=()=>show(k+1);
document.getElementById('first').onclick=()=>show(0);
document.getElementById('last').onclick=()=>show(steps.length-1);
document.addEventListener('keydown',e=>{if(e.key==='ArrowLeft')show(k-1);if(e.key==='ArrowRight')show(k+1);});
show(k);
"""


def _load(source: Any) -> RunRecord:
    if isinstance(source, RunRecord):
        source.validate()
        return source
    record = getattr(source, "record", None)
    if isinstance(record, RunRecord):
        record.validate()
        return record
    if isinstance(source, (str, Path)):
        return RunRecord.from_json(source)
    raise TypeError(
        "expected a RunRecord, a path to an SMC record, or Sequences from a run with "
        f"json_path, got {type(source).__name__}"
    )


def _fmt(x: float) -> str:
    return "-inf" if x == -math.inf else f"{float(x):.4f}"


def _e(x: Any) -> str:
    """Any value as escaped HTML text."""
    return html.escape(str(x), quote=True)


def _text_cell(units: list[str]) -> str:
    parts = []
    for u in units:
        cls = "eos" if u.startswith("<") and u.endswith(">") else "tok"
        parts.append(f'<span class="{cls}">{html.escape(u)}</span>')
    return "".join(parts)


def _table(contexts, log_weights, done, offspring) -> str:
    w = normalized_weights(np.asarray(log_weights, dtype=np.float64))
    rows = ["<tr><th>#</th><th>copies</th><th>log w</th><th>W</th><th>text</th></tr>"]
    for i, (ctx, lw) in enumerate(zip(contexts, log_weights)):
        cls = "dead" if lw == -math.inf else ("done" if done and done[i] else "")
        origin = "" if offspring is None else _e(int(offspring[i]))
        rows.append(
            f'<tr class="{cls}"><td class="num">{i}</td><td class="num">{origin}</td>'
            f'<td class="num">{_fmt(lw)}</td><td class="num">{w[i]:.3f} '
            f'<span class="bar" style="width:{60 * w[i]:.1f}px"></span></td>'
            f'<td class="text">{_text_cell(ctx)}</td></tr>'
        )
    return "<table>" + "".join(rows) + "</table>"


def _step_section(s: StepRecord, n_steps: int) -> str:
    head = f"<h2>Step {_e(int(s.step) + 1)} of {n_steps}</h2><p class=meta>ESS {float(s.ess):.2f}"
    if s.resampled:
        ancestors = _e([int(a) for a in s.ancestors])
        head += f" &middot; resampled; particle <i>i</i> copies <i>ancestors[i]</i>: {ancestors}"
    head += "</p>"
    copies = None
    if s.resampled:
        copies = np.bincount(np.asarray(s.ancestors, dtype=np.int64), minlength=len(s.contexts)).tolist()
    return f'<section class="step">{head}{_table(s.contexts, s.log_weights, s.done, copies)}</section>'


def render_html(record: RunRecord, title: str = "SMC run") -> str:
    """The HTML page of a run record (checked first: see `RunRecord.validate`).

    Raises:
        TypeError: if `record` is not a `RunRecord`.
        ValueError: naming the first field of `record` of the wrong type or out of range.
    """
    if not isinstance(record, RunRecord):
        raise TypeError(f"expected a RunRecord, got {type(record).__name__}")
    record.validate()
    n = len(record.steps)
    sections = [_step_section(s, n) for s in record.steps]
    final = _table(record.final_contexts, record.final_log_weights, None, None)
    sections.append(f'<section class="step"><h2>Result</h2>{final}</section>')
    meta = (
        f"{_e(record.n_particles)} particles &middot; ess_threshold {_e(record.ess_threshold)} &middot; "
        f"max_tokens {_e(record.max_tokens)} &middot; {_e(record.resampling_method)} "
        f"resampling &middot; seed {_e(record.seed)} &middot; log_ml {_fmt(record.log_ml)}"
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p class=meta>{meta}</p>"
        "<nav><button id=first>&laquo;</button><button id=prev>&lsaquo; prev</button>"
        "<span id=pos></span> <button id=next>next &rsaquo;</button>"
        "<button id=last>&raquo;</button></nav>"
        + "".join(sections)
        + f"<script>{_SCRIPT}</script></body></html>"
    )


class InferenceVisualizer:
    """Renders SMC run records (from `smc(..., json_path=...)`) as static HTML pages.

    Args:
        source: optional record to render with `to_html`: a `RunRecord`, the path of
            a record written by `json_path`, or `Sequences` from such a run.
        port: accepted for compatibility; no server is started.
        serve_dir: folder where `visualize` writes pages (a temporary folder, made on
            first use and removed by `shutdown_server`, by default).
    """

    def __init__(self, source: Any = None, port: int | None = None, serve_dir: str | Path | None = None):
        if isinstance(source, int) and not isinstance(source, bool):
            source, port = None, source
        self._record = None if source is None else _load(source)
        self._port = port
        self._serve_dir = None if serve_dir is None else Path(serve_dir).resolve()
        self._own_dir = False

    @property
    def record(self) -> RunRecord | None:
        return self._record

    def to_html(self, path: str | Path | None = None, source: Any = None) -> str:
        """The page of `source` (or of the visualizer's record), written to `path` if given.

        Raises:
            ValueError: if there is no record to render, a field of the record is of the
                wrong type (the message names it), or `path` is not a usable output path
                (a symbolic link, a directory, in a missing folder: see `record_file`).
        """
        record = self._record if source is None else _load(source)
        if record is None:
            raise ValueError("no record to render: pass a record or a path to one")
        page = render_html(record)
        if path is not None:
            write_text_atomically(path, page, what="path")
        return page

    def visualize(self, json_path: str | Path, auto_open: bool = False) -> str:
        """Write the page of the record at `json_path` into the serve folder.

        Returns:
            The page's `file://` URL (opened in a browser when `auto_open`).

        Raises:
            FileNotFoundError: if `json_path` does not exist.
            ValueError: if the file is not an SMC record (the message names a bad field).
        """
        record = _load(Path(json_path))
        if self._serve_dir is None:
            self._serve_dir = Path(tempfile.mkdtemp(prefix="smc_viz_"))
            self._own_dir = True
        self._serve_dir.mkdir(parents=True, exist_ok=True)
        out = self._serve_dir / (Path(json_path).stem + ".html")
        write_text_atomically(out, render_html(record, title=Path(json_path).name), what="page")
        url = out.resolve().as_uri()
        if auto_open:
            webbrowser.open(url)
        return url

    def shutdown_server(self) -> None:
        """Remove the temporary serve folder (no server runs)."""
        if self._own_dir and self._serve_dir is not None:
            shutil.rmtree(self._serve_dir, ignore_errors=True)
            self._serve_dir, self._own_dir = None, False


__all__ = ["InferenceVisualizer", "render_html"]
