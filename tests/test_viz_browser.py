"""The viewer's page rendered by a real browser (headless Chromium): the DOM after its
script ran has one section per step, one row per particle, the prompt, whitespace
drawn visibly and the resampling marks. Skipped only where no browser is installed
(`.ci/run` installs Debian's `chromium`)."""

import html.parser
import os
import shutil
import subprocess

import pytest
from toys import ab_lm

from genlm.control import SMC, InferenceVisualizer, direct_token_sampler
from genlm.control.smc.record import RunRecord, StepRecord

BROWSER = next(
    (b for b in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome") if b and shutil.which(b)),
    None,
)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine")


def dump_dom(page, tmp_path, fragment=""):
    """The DOM of the page file after its script ran, as Chromium serializes it."""
    done = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.resolve().as_uri() + fragment],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0 and "<body" in done.stdout, done.stderr[-2000:]
    return done.stdout


class Dom(html.parser.HTMLParser):
    """Sections (their classes and particle rows), the prompt, and all text."""

    def __init__(self):
        super().__init__()
        self.sections, self.text, self.prompt = [], [], None
        self._in_prompt = 0

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class") or ""
        if tag == "section":
            self.sections.append({"class": cls.split(), "rows": 0, "copies": []})
        if tag == "tr" and "particle" in cls.split():
            self.sections[-1]["rows"] += 1
        if tag == "p" and cls == "prompt":
            self._in_prompt, self.prompt = 1, ""
        elif self._in_prompt and tag == "span":
            self._in_prompt += 1
        if tag == "td" and "copies" in cls.split():
            self.sections[-1]["copies"].append(None)

    def handle_endtag(self, tag):
        if tag == "p":
            self._in_prompt = 0

    def handle_data(self, data):
        self.text.append(data)
        if self._in_prompt:
            self.prompt += data
        if self.sections and self.sections[-1]["copies"] and self.sections[-1]["copies"][-1] is None:
            self.sections[-1]["copies"][-1] = data


def parse(dom):
    p = Dom()
    p.feed(dom)
    return p


async def test_run_page_in_chromium(tmp_path):
    record_path = tmp_path / "run.json"
    await SMC(direct_token_sampler(ab_lm()))(5, 1.0, 4, json_path=record_path, seed=0)
    record = RunRecord.from_json(record_path)
    page = tmp_path / "run.html"
    InferenceVisualizer(record).to_html(page)
    dom = parse(dump_dom(page, tmp_path))
    steps = dom.sections[:-1]
    assert len(steps) == len(record.steps) and "result" in dom.sections[-1]["class"]
    assert all(s["rows"] == record.n_particles for s in dom.sections)
    # the script ran: exactly one section shown, the last (the result)
    assert [("shown" in s["class"]) for s in dom.sections] == [False] * len(steps) + [True]
    resampled = [s.resampled for s in record.steps]
    assert any(resampled), "ess_threshold 1.0 resamples"
    assert [("resampled" in s["class"]) for s in steps] == resampled
    for s, rec in zip(steps, record.steps):
        if rec.resampled:
            expected = [str(sum(a == i for a in rec.ancestors)) for i in range(record.n_particles)]
        else:
            expected = ["1"] * record.n_particles
        assert s["copies"] == expected
    # a fragment picks the step shown
    first = parse(dump_dom(page, tmp_path, "#step=1"))
    assert "shown" in first.sections[0]["class"] and "shown" not in first.sections[-1]["class"]


def test_prompt_and_whitespace_in_chromium(tmp_path):
    record = RunRecord(
        n_particles=2, ess_threshold=0.5, max_tokens=3, resampling_method="multinomial", seed=0,
        steps=[StepRecord(0, [["  lead"], ["tab\there"]], [0.0, -1.0], [False, False], 1.8)],
        final_contexts=[["  lead", "<EOS>"], ["tab\there", "<EOS>"]],
        final_log_weights=[0.0, -1.0], log_ml=-0.3, prompt="  Two spaces",
    )
    page = tmp_path / "ws.html"
    InferenceVisualizer(record).to_html(page)
    dom = parse(dump_dom(page, tmp_path))
    assert dom.prompt.strip() == "Prompt: ··Two·spaces"
    text = "".join(dom.text)
    assert "··lead" in text and "tab→here" in text and "<EOS>" in text
    assert [s["rows"] for s in dom.sections] == [2, 2]
