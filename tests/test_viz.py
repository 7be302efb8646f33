"""`InferenceVisualizer`: a run record rendered as a self-contained HTML page."""

import html.parser
import json
from pathlib import Path

import pytest
from toys import ab_lm, no_bb

from genlm.control import SMC, InferenceVisualizer, direct_token_sampler
from genlm.control.sampler.record import RunRecord, StepRecord
from genlm.control.viz import render_html


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


# Hostile records -------------------------------------------------------------

PAYLOADS = ["</script><script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "<!--", "]]>&amp;"]
ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "nav", "button",
                "span", "section", "table", "tr", "th", "td", "i", "script"}


class _Audit(html.parser.HTMLParser):
    """Every tag, every attribute, and the text of every script block."""

    def __init__(self):
        super().__init__()
        self.tags, self.attrs, self.scripts, self.text = set(), [], [], []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attrs.extend(attrs)
        self._in_script = tag == "script"
        if tag == "script":
            self.scripts.append("")

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data
        else:
            self.text.append(data)


def _hostile_record(field: str, payload: str) -> RunRecord:
    units = {"step": [["a"], ["b"]], "final": [["a", "<EOS>"], ["b", "<EOS>"]]}
    if field == "step-context":
        units["step"][1] = ["a", payload]
    if field == "final-context":
        units["final"][0] = [payload, "<EOS>"]
    return RunRecord(
        n_particles=2, ess_threshold=0.5, max_tokens=3, seed=7,
        resampling_method=payload if field == "resampling_method" else "multinomial",
        steps=[StepRecord(0, units["step"], [0.0, -1.0], [False, False], 1.5, [1, 1])],
        final_contexts=units["final"], final_log_weights=[-0.5, float("-inf")], log_ml=-1.0,
    )


def _assert_inert(page: str, payload: str) -> None:
    from genlm.control.viz import _SCRIPT

    audit = _Audit()
    audit.feed(page)
    assert audit.tags <= ALLOWED_TAGS, audit.tags - ALLOWED_TAGS
    assert audit.scripts == [_SCRIPT], "one script, the constant one"
    assert not [a for a, _ in audit.attrs if a.startswith("on") or a in ("src", "href")]
    assert payload in "".join(audit.text), "the payload is shown as text"


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("field", ["step-context", "final-context", "resampling_method", "title"])
def test_hostile_strings_are_shown_as_text(field, payload, tmp_path):
    record = _hostile_record(field, payload)
    if field == "title":
        path = tmp_path / f"{payload.replace('/', '_')}.json"
        record.to_json(path)
        InferenceVisualizer(serve_dir=tmp_path / "pages").visualize(path)
        page = (tmp_path / "pages" / (path.stem + ".html")).read_text(encoding="utf-8")
        payload = path.name
    else:
        page = InferenceVisualizer(record).to_html()
    _assert_inert(page, payload)


# Non-string fields: a hostile value is refused, naming the field, from a file or an object.
HOSTILE_FIELDS = ["n_particles", "ess_threshold", "max_tokens", "seed", "log_ml"]


@pytest.mark.parametrize("field", HOSTILE_FIELDS)
def test_hostile_numbers_are_refused_from_a_file(field, tmp_path):
    data = _hostile_record("", "").to_dict()
    data[field] = "<script>alert(1)</script>"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match=f"field {field}: must be"):
        InferenceVisualizer(path)


@pytest.mark.parametrize("field", ["step", "ess", "ancestors", "done", "log_weights"])
def test_hostile_step_fields_are_refused_from_a_file(field, tmp_path):
    data = _hostile_record("", "").to_dict()
    data["steps"][0][field] = "<script>alert(1)</script>"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match=rf"field steps\[0\]\.{field}"):
        InferenceVisualizer().to_html(source=path)


@pytest.mark.parametrize("field", HOSTILE_FIELDS)
def test_tampered_record_objects_are_refused(field):
    record = _hostile_record("", "")
    object.__setattr__(record, field, "<script>alert(1)</script>")  # bypass the frozen dataclass
    with pytest.raises(ValueError, match=f"field {field}"):
        InferenceVisualizer(record)
    with pytest.raises(ValueError, match=f"field {field}"):
        render_html(record)


def test_to_html_never_writes_through_a_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "page.html").symlink_to(victim)
    with pytest.raises(ValueError, match="symbolic link"):
        InferenceVisualizer(_hostile_record("", "")).to_html(tmp_path / "page.html")
    assert victim.read_text() == "precious"
    with pytest.raises(TypeError, match="RunRecord"):
        render_html({"format": "x"})
