"""`InferenceVisualizer`: an SMC run record rendered as one self-contained HTML page.

The page needs no network: the prompt, then every step as a table of particles (how
many copies each leaves after resampling, log weight, normalized weight as a bar,
the text with its whitespace drawn visibly), and a few lines of inline script page
through the steps. A local server (127.0.0.1 only, started on demand) serves pages
at the URLs genlm-control 0.4.1 gave.

A record is input like any other: it is checked field by field before rendering
(`RunRecord.validate`: a field of the wrong type is a `ValueError` naming it), every
value placed into the page is HTML-escaped, and the one inline script is a constant
that carries no data from the record.

Example:
    ```python
    from genlm.control import InferenceVisualizer
    sequences = await sampler.smc(n_particles=10, ess_threshold=0.5, max_tokens=20,
                                  json_path="smc_record.json")
    with InferenceVisualizer(port=0) as viz:    # serves on a free port
        url = viz.visualize("smc_record.json")  # http://127.0.0.1:PORT/smc.html?path=...
    InferenceVisualizer("smc_record.json").to_html("run.html")  # one file, no server
    ```
"""

from __future__ import annotations

import html
import math
import shutil
import tempfile
import urllib.parse
import webbrowser
from pathlib import Path
from typing import Any

import numpy as np

from genlm.control._viz_legacy import LEGACY_NOTE, legacy_record
from genlm.control._viz_server import HOST, PageServer
from genlm.control.smc.record import RunRecord, StepRecord, strict_json
from genlm.control.smc.record_file import read_text_file, write_text_atomically
from genlm.control.smc.resampling import normalized_weights

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em} h2{font-size:1.1em;margin:.6em 0 .2em} .meta{color:#555;font-size:.9em}
p.prompt{margin:.6em 0} p.prompt .text{background:#f4f4f4;padding:.1em .3em}
nav{margin:1em 0} nav button{margin-right:.4em}
table{border-collapse:collapse;font-size:.9em}
td,th{border-bottom:1px solid #eee;padding:.2em .6em;text-align:left;vertical-align:top}
td.num{text-align:right;font-family:monospace;white-space:nowrap}
td.text{font-family:monospace;white-space:pre;max-width:70ch;overflow-x:auto}
.text{font-family:monospace;white-space:pre}
.tok{border-right:1px dotted #bbb} .eos{color:#a33;font-weight:bold}
.ws{color:#b0b0b0}
.bar{background:#4a7;height:.8em;display:inline-block;vertical-align:middle}
tr.done td.text{color:#036} tr.dead td{color:#aaa}
tr.dropped td.copies{color:#a33} tr.copied td.copies{font-weight:bold;color:#063}
.badge{background:#fde8c8;color:#7a4b00;border-radius:.3em;padding:0 .4em;font-size:.85em}
.step{display:none} .step.shown{display:block}
"""

_SCRIPT = """
const steps=[...document.querySelectorAll('.step')];
const at=/step=(\\d+)/.exec(location.hash);let k=at?Number(at[1])-1:steps.length-1;
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

# Whitespace drawn as a visible mark (the characters themselves would be invisible).
_VISIBLE = {" ": "·", "\t": "→", "\n": "↵", "\r": "␍"}


def _load(source: Any) -> RunRecord:
    record = _load_noted(source)[0]
    if record is None:
        raise ValueError(f"{str(source)!r} is an empty genlm-control 0.4.1 record (no steps)")
    return record


def _load_noted(source: Any) -> tuple[RunRecord | None, str | None]:
    """The record of `source`, and a note when it is a genlm-control 0.4.1 record
    (None for 0.4.1's empty list: a run that recorded nothing)."""
    if isinstance(source, (str, Path)):
        data = strict_json(read_text_file(source), source)
        if data == []:
            return None, LEGACY_NOTE
        if isinstance(data, list):
            return legacy_record(data), LEGACY_NOTE
        return RunRecord.from_dict(data), None
    return _load_object(source), None


def _load_object(source: Any) -> RunRecord:
    if isinstance(source, RunRecord):
        source.validate()
        return source
    record = getattr(source, "record", None)
    if isinstance(record, RunRecord):
        record.validate()
        return record
    raise TypeError(
        "expected a RunRecord, a path to an SMC record, or Sequences from a run with "
        f"json_path, got {type(source).__name__}"
    )


def _fmt(x: float) -> str:
    return "-inf" if x == -math.inf else f"{float(x):.4f}"


def _e(x: Any) -> str:
    """Any value as escaped HTML text."""
    return html.escape(str(x), quote=True)


def _visible(text: str) -> str:
    """Escaped `text` with each whitespace character drawn as a grey mark."""
    out = []
    for ch in text:
        mark = _VISIBLE.get(ch)
        out.append(html.escape(ch) if mark is None else f'<span class="ws" title="{ord(ch):#04x}">{mark}</span>')
    return "".join(out)


def _text_cell(units: list[str]) -> str:
    parts = []
    for u in units:
        cls = "eos" if u.startswith("<") and u.endswith(">") else "tok"
        parts.append(f'<span class="{cls}">{_visible(u)}</span>')
    return "".join(parts)


def _table(contexts, log_weights, done, copies) -> str:
    """One row per particle; `copies[i]` is how many particles copy particle `i` after
    resampling (1 each when the step did not resample). The result (`copies` None)
    has no copies column."""
    w = normalized_weights(np.asarray(log_weights, dtype=np.float64))
    head = "<th>copies</th>" if copies is not None else ""
    rows = [f"<tr><th>#</th>{head}<th>log w</th><th>W</th><th>text</th></tr>"]
    for i, (ctx, lw) in enumerate(zip(contexts, log_weights)):
        classes = ["particle"]
        if lw == -math.inf:
            classes.append("dead")
        elif done and done[i]:
            classes.append("done")
        cell = ""
        if copies is not None:
            n_copies = int(copies[i])
            classes.extend(["dropped"] if n_copies == 0 else ["copied"] if n_copies > 1 else [])
            cell = f'<td class="num copies">{n_copies}</td>'
        rows.append(
            f'<tr class="{" ".join(classes)}"><td class="num">{i}</td>{cell}'
            f'<td class="num">{_fmt(lw)}</td><td class="num">{w[i]:.3f} '
            f'<span class="bar" style="width:{60 * w[i]:.1f}px"></span></td>'
            f'<td class="text">{_text_cell(ctx)}</td></tr>'
        )
    return "<table>" + "".join(rows) + "</table>"


def _step_section(s: StepRecord, n_steps: int) -> str:
    head = f"<h2>Step {_e(int(s.step) + 1)} of {n_steps}</h2><p class=meta>ESS {float(s.ess):.2f}"
    n = len(s.contexts)
    if s.resampled:
        ancestors = _e([int(a) for a in s.ancestors])
        head += (
            ' &middot; <span class="badge">resampled</span> particle <i>i</i> copies '
            f"<i>ancestors[i]</i>: {ancestors}"
        )
        copies = np.bincount(np.asarray(s.ancestors, dtype=np.int64), minlength=n).tolist()
    else:
        copies = [1] * n
    head += "</p>"
    kind = "step resampled" if s.resampled else "step"
    return f'<section class="{kind}">{head}{_table(s.contexts, s.log_weights, s.done, copies)}</section>'


def render_html(record: RunRecord, title: str = "SMC run", note: str | None = None) -> str:
    """The HTML page of a run record (checked first: see `RunRecord.validate`).

    Args:
        note: a line shown under the title instead of the run's settings.

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
    sections.append(f'<section class="step result"><h2>Result</h2>{final}</section>')
    meta = (
        f"{_e(record.n_particles)} particles &middot; ess_threshold {_e(record.ess_threshold)} &middot; "
        f"max_tokens {_e(record.max_tokens)} &middot; {_e(record.resampling_method)} "
        f"resampling &middot; seed {_e(record.seed)} &middot; log_ml {_fmt(record.log_ml)}"
    )
    if note is not None:
        meta = f"{_e(note)} &middot; {_e(record.n_particles)} particles &middot; log_ml {_fmt(record.log_ml)}"
    if record.prompt is None:
        prompt = '<p class="prompt">Prompt: <i>not recorded</i></p>'
    else:
        prompt = f'<p class="prompt">Prompt: <span class="text">{_visible(record.prompt)}</span></p>'
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p class=meta>{meta}</p>{prompt}"
        "<nav><button id=first>&laquo;</button><button id=prev>&lsaquo; prev</button>"
        "<span id=pos></span> <button id=next>next &rsaquo;</button>"
        "<button id=last>&raquo;</button></nav>"
        + "".join(sections)
        + f"<script>{_SCRIPT}</script></body></html>"
    )


def _page_of(path: Path) -> str:
    record, note = _load_noted(path)
    return _empty_page(path.name) if record is None else render_html(record, title=path.name, note=note)


def _empty_page(title: str) -> str:
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        "<p class=meta>This record has no steps.</p></body></html>"
    )


def _index_page(folder: Path) -> str:
    """The served folder's record files, each linked to its page."""
    names = sorted(p.name for p in folder.glob("*.json") if p.is_file() and not p.is_symlink())
    items = "".join(
        f'<li><a href="smc.html?path={_e(urllib.parse.quote(n))}">{_e(n)}</a></li>' for n in names
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>SMC records</title>"
        f"<style>{_STYLE}</style></head><body><h1>SMC records</h1>"
        f"<ul>{items or '<li>none yet: call visualize(path)</li>'}</ul></body></html>"
    )


class InferenceVisualizer:
    """Renders SMC run records (from `smc(..., json_path=...)`) as HTML pages.

    As in genlm-control 0.4.1, `InferenceVisualizer()` starts a local HTTP server
    (on port 8000 by default), `visualize(json_path)` returns a URL on it
    (`http://127.0.0.1:PORT/smc.html?path=NAME`) and `shutdown_server()` stops it.
    The server listens on 127.0.0.1 only, and the visualizer is a context manager that
    shuts it down. A visualizer made for a record (`source`) or with `serve=False`
    starts none until the first `visualize` (or `start_server()`);
    `visualize(..., serve=False)` and `to_html` need no server: the page is one
    self-contained file. Records written by 0.4.1 (a JSON list of steps) are read as
    well as ours. Importing this module binds nothing.

    Args:
        source: optional record to render with `to_html`: a `RunRecord`, the path of
            a record written by `json_path`, or `Sequences` from such a run.
        port: the server's port (default 8000, as in 0.4.1; 0 picks a free one).
        serve_dir: the folder the server serves and `visualize` writes pages into (a
            temporary folder, made on first use and removed by `shutdown_server`, by
            default).
        serve: start the server in the constructor; by default (None) when no
            `source` is given, as 0.4.1's `InferenceVisualizer()` did.

    Raises:
        OSError: when the constructor starts the server and the port cannot be bound
            ("Port N is already in use", or the system's error).
    """

    def __init__(
        self,
        source: Any = None,
        port: int | None = None,
        serve_dir: str | Path | None = None,
        *,
        serve: bool | None = None,
    ):
        if isinstance(source, int) and not isinstance(source, bool):
            source, port = None, source
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536):
            raise ValueError(f"port must be an integer in [0, 65536), got {port!r}")
        self._record = None if source is None else _load(source)
        self._port = 8000 if port is None else port
        self._serve_dir = None if serve_dir is None else Path(serve_dir).resolve()
        self._own_dir = False
        self._server: PageServer | None = None
        self._shut = False
        if serve is None:
            serve = source is None
        if serve:
            try:
                self.start_server()
            except BaseException:
                self.shutdown_server()  # removes the temporary folder made for it
                raise

    @property
    def record(self) -> RunRecord | None:
        return self._record

    @property
    def port(self) -> int:
        """The server's port (the one bound, once started with port 0)."""
        return self._server.port if self._server is not None else self._port

    @property
    def serving(self) -> bool:
        return self._server is not None

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

    def _folder(self) -> Path:
        if self._serve_dir is None:
            self._serve_dir = Path(tempfile.mkdtemp(prefix="smc_viz_"))
            self._own_dir = True
        self._serve_dir.mkdir(parents=True, exist_ok=True)
        return self._serve_dir

    def start_server(self) -> str:
        """Start the server now (`visualize` starts it when needed); return its base URL.

        Raises:
            RuntimeError: after `shutdown_server()`.
            OSError: "Port N is already in use", or another reason it cannot bind.
        """
        if self._shut:
            raise RuntimeError("Server is not running: this visualizer was shut down (make a new one)")
        if self._server is None:
            self._server = PageServer(self._port, self._folder(), _page_of, _index_page)
        return f"http://{HOST}:{self._server.port}/"

    def visualize(self, json_path: str | Path, auto_open: bool = False, serve: bool = True) -> str:
        """Show the record at `json_path`: copy it into the served folder, write its page
        there, and return the page's URL (opened in a browser when `auto_open`).

        Args:
            serve: True (default): the URL is the server's (started if needed);
                False: the page file's `file://` URL, with no server.

        Raises:
            RuntimeError: with `serve`, after `shutdown_server()` (checked first).
            FileNotFoundError: if `json_path` does not exist.
            ValueError: if the file is not an SMC record (the message names a bad field).
        """
        if serve and self._shut:  # checked first, as in 0.4.1
            raise RuntimeError("Server is not running: this visualizer was shut down (make a new one)")
        json_path = Path(json_path)
        if not json_path.exists():
            raise FileNotFoundError(f"JSON file not found: {json_path}")
        page = _page_of(json_path)  # checks the record first
        folder = self._folder()
        dest = folder / json_path.name
        if json_path.resolve() != dest.resolve():
            shutil.copyfile(json_path, dest)
        out = folder / (json_path.stem + ".html")
        write_text_atomically(out, page, what="page")
        if serve:
            base = self.start_server()
            url = f"{base}smc.html?path={urllib.parse.quote(json_path.name)}"
        else:
            url = out.resolve().as_uri()
        if auto_open:
            webbrowser.open(url)
        return url

    def shutdown_server(self) -> None:
        """Stop the server (if one runs) and remove the temporary serve folder; a
        folder given as `serve_dir` is the user's and stays."""
        if self._server is not None:
            self._server.close()
            self._server = None
        self._shut = True
        if self._own_dir and self._serve_dir is not None:
            shutil.rmtree(self._serve_dir, ignore_errors=True)
            self._serve_dir, self._own_dir = None, False

    def __enter__(self) -> "InferenceVisualizer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown_server()

    def __del__(self) -> None:
        server = getattr(self, "_server", None)
        if server is not None:
            server.close()


__all__ = ["InferenceVisualizer", "render_html"]
