"""`InferenceVisualizer`: a run record rendered as a self-contained HTML page."""

import html.parser
import json
import re
from pathlib import Path

import pytest
from toys import ab_lm, no_bb

from genlm.control import SMC, InferenceVisualizer, direct_token_sampler
from genlm.control.smc.record import RunRecord, StepRecord
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
    viz = InferenceVisualizer(serve_dir=tmp_path / "pages", serve=False)
    url = viz.visualize(path, serve=False)
    assert url.startswith("file://") and (tmp_path / "pages" / "rec.html").exists()
    assert not viz.serving, "no server for a file page"
    viz.shutdown_server()
    assert (tmp_path / "pages" / "rec.html").exists(), "a given folder is the user's"

    tmp_viz = InferenceVisualizer(8000, serve=False)  # a port, as positional argument, is accepted
    assert not tmp_viz.serving and tmp_viz.port == 8000, "serve=False: the constructor starts no server"
    url = tmp_viz.visualize(path, serve=False)
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
        InferenceVisualizer(serve=False).to_html()
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
    shown = "".join(audit.text).replace("·", " ")  # whitespace is drawn as a visible mark
    assert payload in shown, "the payload is shown as text"


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("field", ["step-context", "final-context", "resampling_method", "title"])
def test_hostile_strings_are_shown_as_text(field, payload, tmp_path):
    record = _hostile_record(field, payload)
    if field == "title":
        path = tmp_path / f"{payload.replace('/', '_')}.json"
        record.to_json(path)
        InferenceVisualizer(serve_dir=tmp_path / "pages", serve=False).visualize(path, serve=False)
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
        InferenceVisualizer(serve=False).to_html(source=path)


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


# The page's content: prompt, copies, visible whitespace -------------------------------


def _two_step_record(prompt="  The value is"):
    return RunRecord(
        n_particles=3, ess_threshold=0.5, max_tokens=3, resampling_method="multinomial", seed=0,
        steps=[
            StepRecord(0, [[" a"], ["  b"], ["\n"]], [0.0, -1.0, float("-inf")], [False] * 3, 1.5, [0, 0, 1]),
            StepRecord(1, [[" a", "<EOS>"], [" a", "x"], ["  b", "<EOS>"]], [0.0, -0.5, -0.2], [True, False, True], 2.7),
        ],
        final_contexts=[[" a", "<EOS>"], [" a", "x", "<EOS>"], ["  b", "<EOS>"]],
        final_log_weights=[0.0, -0.5, -0.2], log_ml=-0.3, prompt=prompt,
    )


def test_page_shows_prompt_copies_and_whitespace():
    page = render_html(_two_step_record())
    assert 'Prompt: <span class="text"><span class="ws" title="0x20">·</span>' in page
    # step 1 resampled: ancestors [0, 0, 1] -> copies 2, 1, 0; step 2 did not: 1 each
    copies = re.findall(r'<td class="num copies">([^<]*)</td>', page)
    assert copies == ["2", "1", "0", "1", "1", "1"]  # the result has no copies column
    parsed = _parse(page)
    text = "".join(parsed.text)
    assert "resampled" in text and "↵" in text and "·a" in text and "··b" in text
    assert render_html(_two_step_record(prompt=None)).count("not recorded") == 1


def test_record_keeps_the_prompt_through_json(tmp_path):
    record = _two_step_record()
    record.to_json(tmp_path / "r.json")
    assert RunRecord.from_json(tmp_path / "r.json").prompt == "  The value is"
    data = json.loads((tmp_path / "r.json").read_text())
    del data["prompt"]  # records written before the prompt was kept still read
    (tmp_path / "old.json").write_text(json.dumps(data))
    assert RunRecord.from_json(tmp_path / "old.json").prompt is None
    bad = dict(data, prompt=3)
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="field prompt"):
        RunRecord.from_json(tmp_path / "bad.json")


async def test_run_record_holds_the_models_prompt(tmp_path, llm):
    model = llm.spawn()
    model.set_prompt_from_str("  Numbers:")
    await direct_token_sampler(model).smc(2, 0.5, 2, seed=0, json_path=tmp_path / "r.json")
    assert RunRecord.from_json(tmp_path / "r.json").prompt == "  Numbers:"


# genlm-control 0.4.1's record files and server ----------------------------------------

LEGACY = [
    {"step": 1, "mode": "init", "particles": [
        {"contents_incr": "", "logweight": "0.0", "weight_incr": "0.0"},
        {"contents_incr": "", "logweight": "0.0", "weight_incr": "0.0"}]},
    {"step": 2, "mode": "smc_step", "particles": [
        {"contents_incr": "␣h", "logweight": "-1.5", "weight_incr": "-1.5"},
        {"contents_incr": "i", "logweight": "-Infinity", "weight_incr": "-Infinity"}]},
    {"step": 3, "mode": "resample", "ancestors": [0, 0], "particles": [
        {"contents_incr": "", "logweight": "-1.5", "weight_incr": "0.0"},
        {"contents_incr": "", "logweight": "-1.5", "weight_incr": "0.0"}]},
    {"step": 4, "mode": "smc_step", "particles": [
        {"contents_incr": "EOS", "logweight": "-1.6", "weight_incr": "-0.1"},
        {"contents_incr": "e", "logweight": null, "weight_incr": "0.0"}]},
] if (null := None) is None else None


def test_legacy_record_is_read(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps(LEGACY))
    record = InferenceVisualizer(path).record
    assert [s.contexts for s in record.steps] == [[[], []], [[" h"], ["i"]], [[" h", "<EOS>"], [" h", "e"]]]
    assert record.steps[1].ancestors == [0, 0] and record.steps[2].ancestors is None
    assert record.steps[2].done == [True, False]
    assert record.final_log_weights == [-1.6, float("-inf")]
    page = InferenceVisualizer(serve=False).visualize(path, serve=False)
    assert "0.4.1 record" in Path(page.removeprefix("file://")).read_text(encoding="utf-8")
    path.write_text(json.dumps([{"mode": "elsewhere"}]))
    with pytest.raises(ValueError, match=r"\[0\]\.mode"):
        InferenceVisualizer(path)


def _get(url):
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def test_server_starts_on_demand_on_localhost_and_closes(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps(LEGACY))
    with InferenceVisualizer(port=0, serve=False) as viz:  # a free port: tests never take 8000
        assert not viz.serving, "serve=False: started by the first visualize"
        url = viz.visualize(path)
        assert viz.serving and url == f"http://127.0.0.1:{viz.port}/smc.html?path=old.json"
        status, kind, body = _get(url)
        assert status == 200 and kind.startswith("text/html") and b"Step 1 of 3" in body
        status, kind, body = _get(f"http://127.0.0.1:{viz.port}/old.json")
        assert status == 200 and json.loads(body) == LEGACY  # the copied record, as 0.4.1 served it
        assert _get(f"http://127.0.0.1:{viz.port}/../etc/passwd")[0] == 404
        assert _get(f"http://127.0.0.1:{viz.port}/smc.html?path=missing.json")[0] == 404
        assert viz._server._server.server_address[0] == "127.0.0.1"
        port = viz.port
    assert not viz.serving
    with pytest.raises(RuntimeError, match="Server is not running"):
        viz.visualize(path)
    import socket

    with socket.socket() as s:  # the port is free again (connections may linger in TIME_WAIT)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()


def test_port_in_use_and_bad_port(tmp_path):
    with InferenceVisualizer(port=0) as first:
        assert first.serving, "with no source the constructor serves, as 0.4.1's did"
        with pytest.raises(OSError, match="Port .* already in use"):
            InferenceVisualizer(port=first.port)
        with pytest.raises(OSError, match="Port .* already in use"):
            InferenceVisualizer(port=first.port, serve=False).start_server()
    with pytest.raises(ValueError, match="port"):
        InferenceVisualizer(port=70000)
    with InferenceVisualizer(port=0) as viz, pytest.raises(FileNotFoundError, match="JSON file not found"):
        viz.visualize(tmp_path / "none.json")


def test_empty_legacy_record_and_the_index(tmp_path):
    (tmp_path / "empty.json").write_text("[]")  # 0.4.1 wrote [] for a run that recorded nothing
    with InferenceVisualizer(port=0) as viz:
        status, _, body = _get(viz.visualize(tmp_path / "empty.json"))
        assert status == 200 and b"no steps" in body
        status, kind, body = _get(f"http://127.0.0.1:{viz.port}/smc.html")
        assert status == 200 and kind.startswith("text/html") and b"smc.html?path=empty.json" in body
    with pytest.raises(ValueError, match="empty"):
        InferenceVisualizer(tmp_path / "empty.json")
