"""Run records: checked field by field, their path checked before the run, written
atomically and never through a link, and a failed write never loses the result."""

import json
import math
import os
import stat

import pytest
from toys import ab_lm, no_bb

from genlm.control import SMC, direct_token_sampler
from genlm.control.smc.record import FORMAT, RecordError, RunRecord, StepRecord
from genlm.control.smc.record_file import (
    RecordNotWrittenWarning,
    check_output_path,
    write_text_atomically,
)


def good_dict() -> dict:
    """A valid record of 2 particles and one resampling step, as JSON data."""
    step = {"step": 0, "contexts": [["a"], ["b"]], "log_weights": [-0.5, None], "done": [False, True],
            "ess": 1.0, "ancestors": [0, 0]}
    return {
        "format": FORMAT, "n_particles": 2, "ess_threshold": 0.5, "max_tokens": 4,
        "resampling_method": "multinomial", "seed": 3, "steps": [step],
        "final_contexts": [["a", "<EOS>"], ["a", "<EOS>"]], "final_log_weights": [-1.0, None],
        "log_ml": -1.5,
    }


def test_good_record_round_trips(tmp_path):
    record = RunRecord.from_dict(good_dict())
    assert record.steps[0].log_weights == [-0.5, -math.inf]
    assert record.final_log_weights == [-1.0, -math.inf]
    assert record.to_dict() == good_dict()
    path = tmp_path / "r.json"
    record.to_json(path)
    assert RunRecord.from_json(path) == record
    assert json.loads(path.read_text()) == good_dict()


def _set(d: dict, field: str, value) -> dict:
    """`d` with the field at the dotted path `field` (list indices as numbers) replaced."""
    keys = [int(k) if k.isdigit() else k for k in field.split(".")]
    node = d
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    return d


# (dotted path in the JSON data, bad value, field named in the error)
BAD_FIELDS = [
    ("n_particles", "2", "n_particles"),
    ("n_particles", 0, "n_particles"),
    ("n_particles", True, "n_particles"),
    ("ess_threshold", "<script>", "ess_threshold"),
    ("ess_threshold", 1.5, "ess_threshold"),
    ("max_tokens", 2.5, "max_tokens"),
    ("resampling_method", 5, "resampling_method"),
    ("seed", "<script>alert(1)</script>", "seed"),
    ("seed", -1, "seed"),
    ("log_ml", "x", "log_ml"),
    ("log_ml", 1e400, "log_ml"),  # +inf
    ("final_contexts", "ab", "final_contexts"),
    ("final_contexts.0", "a", "final_contexts[0]"),
    ("final_contexts.1.0", 7, "final_contexts[1][0]"),
    ("final_contexts", [["a"]], "final_contexts"),  # one particle short
    ("final_log_weights.0", "0", "final_log_weights[0]"),
    ("steps", {"step": 0}, "steps"),
    ("steps.0", [], "steps[0]"),
    ("steps.0.step", "<b>", "steps[0].step"),
    ("steps.0.contexts.0.0", {"x": 1}, "steps[0].contexts[0][0]"),
    ("steps.0.contexts", [["a"]], "steps[0]"),  # lengths disagree
    ("steps.0.log_weights.1", "-inf", "steps[0].log_weights[1]"),
    ("steps.0.done.0", "yes", "steps[0].done[0]"),
    ("steps.0.ess", None, "steps[0].ess"),
    ("steps.0.ess", 3.0, "steps[0].ess"),  # above n
    ("steps.0.ancestors.0", 2, "steps[0].ancestors[0]"),
    ("steps.0.ancestors.0", -1, "steps[0].ancestors[0]"),
    ("steps.0.ancestors", "<script>", "steps[0].ancestors"),
]


@pytest.mark.parametrize("field, value, named", BAD_FIELDS, ids=[f"{f}={v!r}" for f, v, _ in BAD_FIELDS])
def test_bad_field_is_a_value_error_naming_it(field, value, named):
    with pytest.raises(RecordError) as info:
        RunRecord.from_dict(_set(good_dict(), field, value))
    assert info.value.field.startswith(named), (info.value.field, named)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("key", ["n_particles", "steps", "log_ml", "final_contexts"])
def test_missing_field_is_named(key):
    d = good_dict()
    del d[key]
    with pytest.raises(RecordError, match=f"field {key}: is missing"):
        RunRecord.from_dict(d)


def test_records_built_in_python_are_checked_too():
    with pytest.raises(RecordError, match="seed"):
        RunRecord(1, 0.5, 3, "multinomial", seed="<script>", final_contexts=[[]], final_log_weights=[0.0])
    with pytest.raises(RecordError, match="done"):
        StepRecord(0, [["a"]], [0.0], [1], 1.0)
    record = RunRecord.from_dict(good_dict())
    record.steps[0].contexts[0].append(5)  # lists stay mutable: validate() sees it
    with pytest.raises(RecordError, match=r"steps\[0\]\.contexts\[0\]\[1\]"):
        record.validate()


@pytest.mark.parametrize(
    "content, message",
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"format": NaN}', "not JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"{not json", "not JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'"text"', "must be a JSON object"),
    ],
    ids=["deep", "nan", "binary", "not-json", "list", "string"],
)
def test_hostile_files_are_value_errors(tmp_path, content, message):
    path = tmp_path / "r.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        RunRecord.from_json(path)


# Output paths ----------------------------------------------------------------


def test_path_rules(tmp_path):
    (tmp_path / "target.json").write_text("keep")
    os.symlink(tmp_path / "target.json", tmp_path / "link.json")
    os.symlink(tmp_path / "nowhere.json", tmp_path / "dangling.json")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_text("x")
    cases = {
        "": "is empty",
        str(tmp_path / "link.json"): "symbolic link",
        str(tmp_path / "dangling.json"): "symbolic link",
        str(tmp_path): "is a directory",
        str(tmp_path) + "/": "names a folder",
        str(tmp_path / "fifo"): "not a regular file",
        str(tmp_path / "missing" / "r.json"): "folder that does not exist",
        str(tmp_path / "file" / "r.json"): "not a folder|cannot be used",
        str(tmp_path / "a\0b"): "NUL",
        str(tmp_path / ("x" * 300)): "cannot be used",
    }
    for path, message in cases.items():
        with pytest.raises(ValueError, match=message):
            check_output_path(path)
    for bad in (5, b"r.json", None, True):
        with pytest.raises(TypeError, match="json_path must be"):
            check_output_path(bad)
    assert (tmp_path / "target.json").read_text() == "keep"
    assert not (tmp_path / "nowhere.json").exists(), "a check creates nothing"
    assert check_output_path(tmp_path / "target.json") == tmp_path / "target.json"


def test_check_neither_creates_nor_truncates(tmp_path):
    (tmp_path / "old.json").write_text("previous")
    check_output_path(tmp_path / "old.json")
    check_output_path(tmp_path / "new.json")
    assert (tmp_path / "old.json").read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json"]


def test_write_is_atomic_and_keeps_permissions(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")
    os.chmod(path, 0o640)
    os.link(path, tmp_path / "hardlink.json")
    write_text_atomically(path, "new")
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    # the file is replaced, not written in place: another name of the old file keeps it
    assert (tmp_path / "hardlink.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hardlink.json", "r.json"]


def test_never_writes_through_a_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.symlink(victim, tmp_path / "r.json")
    with pytest.raises(ValueError, match="symbolic link"):
        RunRecord.from_dict(good_dict()).to_json(tmp_path / "r.json")
    assert victim.read_text() == "precious"


# json_path in SMC ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["missing-folder", "directory", "symlink"])
async def test_bad_json_path_fails_before_sampling(tmp_path, kind):
    lm = ab_lm()
    path = {"missing-folder": tmp_path / "no" / "r.json", "directory": tmp_path, "symlink": tmp_path / "l"}[kind]
    if kind == "symlink":
        os.symlink(tmp_path / "t", path)
    with pytest.raises(ValueError, match="json_path"):
        await SMC(direct_token_sampler(lm))(4, 0.5, 3, json_path=path, seed=0)
    assert lm.batch_calls == 0, "nothing is sampled before the path is checked"


async def test_failed_write_returns_the_result_and_warns(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / "r.json"

    def remove_folder(context):  # the folder disappears while the run goes on
        if folder.exists():
            folder.rmdir()
        return False

    sampler = direct_token_sampler(ab_lm())
    with pytest.warns(RecordNotWrittenWarning, match="not written to .*r.json.*folder that does not exist") as caught:
        seqs = await SMC(sampler, no_bb())(4, 0.5, 3, json_path=path, seed=0, terminate_when=remove_folder)
    assert caught[0].message.path == str(path)
    reference = await SMC(sampler, no_bb())(4, 0.5, 3, seed=0)
    assert seqs.contexts == reference.contexts
    assert seqs.log_weights.tolist() == reference.log_weights.tolist()
    assert seqs.record.log_ml == pytest.approx(seqs.log_ml)
    # nothing is lost: the record can be saved elsewhere
    seqs.record.to_json(tmp_path / "saved.json")
    assert RunRecord.from_json(tmp_path / "saved.json") == seqs.record
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved.json"], "no temporary file left"


async def test_a_directory_appearing_during_the_run_is_reported(tmp_path):
    path = tmp_path / "r.json"

    def make_directory(context):
        path.mkdir(exist_ok=True)
        return False

    with pytest.warns(RecordNotWrittenWarning, match="is a directory"):
        seqs = await SMC(direct_token_sampler(ab_lm()))(3, 0.5, 3, json_path=path, seed=1, terminate_when=make_directory)
    assert len(seqs) == 3 and path.is_dir()
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"], "no temporary file left"


async def test_disk_full_after_the_run_returns_the_result(tmp_path, monkeypatch):
    import errno

    from genlm.control.smc import record_file

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(record_file.os, "fsync", no_space)
    with pytest.warns(RecordNotWrittenWarning, match="No space left on device"):
        seqs = await SMC(direct_token_sampler(ab_lm()))(3, 0.5, 3, json_path=tmp_path / "r.json", seed=2)
    assert len(seqs) == 3 and seqs.record is not None
    assert list(tmp_path.iterdir()) == [], "the temporary file is removed"
