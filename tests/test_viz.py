"""`InferenceVisualizer`: a run record rendered as a self-contained HTML page."""

import html.parser
import sys
from pathlib import Path

import pytest

from genlm.control import SMC, InferenceVisualizer, direct_token_sampler
from genlm.control.sampler.record import RunRecord, StepRecord

sys.path.insert(0, str(Path(__file__).parent / "sampler"))
from toys import ab_lm, no_bb  # noqa: E402


class _Page(html.parser.HTMLParser):
    """Collects sections, table rows, text, and any external reference."""

    def __init__(self):
        super().__init__()
        self.sections = self.rows = 0
        self.text: list[str] = []
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.sections += tag == "section"
        self.rows += tag == "tr"
        for key in ("src", "href"):
            if key in attrs:
                self.external.append(attrs[key])

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Page:
    p = _Page()
    p.feed(page)
    return p


async def test_run_record_renders_every_step(tmp_path):
    path = tmp_path / "run.json"
    seqs = await SMC(direct_token_sampler(ab_lm()), no_bb())(4, 1.0, 4, json_path=path, seed=0)
    out = tmp_path / "run.html"
    page = InferenceVisualizer(path).to_html(out)
    assert out.read_text(encoding="utf-8") == page
    parsed = _parse(page)
    record = seqs.record
    assert parsed.sections == len(record.steps) + 1  # every step and the result
    assert parsed.rows == (len(record.steps) + 1) * (4 + 1)  # header + one row per particle
    assert parsed.external == [], "the page must not load anything"
    text = "".join(parsed.text)
    assert "<EOS>" in text and "log_ml" in text and "resampled" in text
    # the same page from the record object and from the Sequences
    assert InferenceVisualizer(record).to_html() == page
    assert InferenceVisualizer(seqs).to_html() == page


def test_text_is_escaped():
    rec = RunRecord(
        n_particles=1, ess_threshold=0.5, max_tokens=3, resampling_method="multinomial", seed=None,
        steps=[StepRecord(0, [["<script>alert(1)</script>"]], [0.0], [False], 1.0)],
        final_contexts=[["<b>", "<EOS>"]], final_log_weights=[float("-inf")], log_ml=float("-inf"),
    )
    page = InferenceVisualizer(rec).to_html()
    assert "<script>alert(1)" not in page and "&lt;script&gt;" in page
    assert "-inf" in page


async def test_visualize_writes_into_serve_dir(tmp_path):
    path = tmp_path / "rec.json"
    await SMC(direct_token_sampler(ab_lm()))(3, 0.5, 3, json_path=path, seed=1)
    viz = InferenceVisualizer(serve_dir=tmp_path / "pages")
    url = viz.visualize(path)
    assert url.startswith("file://") and (tmp_path / "pages" / "rec.html").exists()
    viz.shutdown_server()
    assert (tmp_path / "pages" / "rec.html").exists(), "a given folder is the user's"

    tmp_viz = InferenceVisualizer(8000)  # a port, as positional argument, is accepted
    url = tmp_viz.visualize(path)
    page = Path(url.removeprefix("file://"))
    assert page.exists()
    tmp_viz.shutdown_server()
    assert not page.exists()


def test_bad_sources(tmp_path):
    with pytest.raises(FileNotFoundError):
        InferenceVisualizer(tmp_path / "missing.json")
    with pytest.raises(TypeError, match="RunRecord"):
        InferenceVisualizer([1, 2])
    with pytest.raises(ValueError, match="no record"):
        InferenceVisualizer().to_html()
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not an SMC record"):
        InferenceVisualizer(bad)
