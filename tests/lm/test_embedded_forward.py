"""The embedded model's plain-torch forward (`TinyGPT2`, `EmbeddedTransformer`) against
the HF backend's transformers model: the same rows (uncached, from cached states, with
padded pasts), the same byte vocabulary, the same `PromptedLLM` weights, the same CLI
result; and the CLI run never imports transformers' GPT-2 model code."""

import asyncio
import json
import random
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from genlm.control import PromptedLLM  # noqa: E402
from genlm.control.embedded import EMBEDDED_MODEL, model_path  # noqa: E402
from genlm.control.embedded.gpt2 import TinyGPT2  # noqa: E402
from genlm.control.lm import _llm_loading as load_model_module  # noqa: E402
from genlm.control.lm._llm_loading import _max_positions, load_model  # noqa: E402
from genlm.control.lm.embedded_lm import EmbeddedTransformer, load_embedded  # noqa: E402

# float32 rounding of a two-layer forward: log probabilities of magnitude ≤ 30 agree to
# ~1e-5 absolute (relative ~1e-6); a wrong mask, position or layer is off by > 1e-2.
ATOL = 1e-4


@pytest.fixture(scope="module")
def hf():
    return load_model(EMBEDDED_MODEL, "hf")


@pytest.fixture(scope="module")
def reference(hf):
    """The transformers model, uncached (each query one forward from position 0)."""

    def rows(keys):
        out = []
        with torch.no_grad():
            for k in keys:
                logits = hf.model(torch.tensor([list(k)])).logits[0, -1]
                out.append(torch.log_softmax(logits.float(), dim=-1))
        return torch.stack(out)

    return rows


def random_keys(rng, n, longest=40):
    return [tuple(rng.randrange(4096) for _ in range(rng.randint(1, longest))) for _ in range(n)]


def test_byte_vocabulary_and_tokenizer_are_the_backends(hf):
    fast = EmbeddedTransformer.from_dir()
    assert [(t.token_id, bytes(t)) for t in fast.byte_vocab] == [(t.token_id, bytes(t)) for t in hf.byte_vocab]
    assert fast.str_vocab == hf.str_vocab
    text = "The value of x is 42, naïvely."
    assert fast.tokenizer.encode(text) == hf.tokenizer.encode(text)
    assert _max_positions(fast) == _max_positions(hf) == 256
    assert fast.cache_bytes == hf.cache_bytes


def test_uncached_rows_match_transformers(reference):
    fast = EmbeddedTransformer.from_dir(cache_bytes=0)  # nothing cached: every row from position 0
    keys = random_keys(random.Random(0), 12)
    got = fast.batch_next_token_logprobs_sync(keys)
    want = reference(keys)
    assert torch.allclose(got, want, atol=ATOL, rtol=0), (got - want).abs().max()
    assert torch.allclose(got.exp().sum(-1), torch.ones(len(keys)), atol=1e-5)


def test_cached_and_padded_rows_match_transformers(reference):
    """Batches that extend earlier ones start from cached states of unequal lengths
    (right-padded and masked) and answer prefixes from one row's forward."""
    rng = random.Random(1)
    fast = EmbeddedTransformer.from_dir()
    fed = []
    inner = fast.model.forward

    def counting(input_ids, **kwargs):
        fed.append(input_ids.shape[1])
        return inner(input_ids, **kwargs)

    fast.model.forward = counting
    roots = random_keys(rng, 4, longest=20)
    batches = [roots]
    for _ in range(3):  # each step: every sequence grows by 1-3 tokens, and one prefix is asked
        grown = [k + tuple(rng.randrange(4096) for _ in range(rng.randint(1, 3))) for k in batches[-1]]
        batches.append(grown + [grown[0][:-1]])
    for keys in batches:
        got = fast.batch_next_token_logprobs_sync(keys)
        want = reference(keys)
        assert torch.allclose(got, want, atol=ATOL, rtol=0), (got - want).abs().max()
    longest = max(len(k) for k in batches[-1])
    assert max(fed[1:]) < longest, "later batches must read cached states, not re-run whole contexts"


def test_async_batched_rows_match_the_hf_backend(hf):
    """Concurrent queries (one event-loop window, one forward) agree with the HF backend."""
    keys = random_keys(random.Random(2), 6)
    fast = EmbeddedTransformer.from_dir()

    async def both():
        got = await asyncio.gather(*(fast.next_token_logprobs(list(k)) for k in keys))
        want = await asyncio.gather(*(hf.next_token_logprobs(list(k)) for k in keys))
        return torch.stack(got), torch.stack(want)

    got, want = asyncio.run(both())
    assert torch.allclose(got, want, atol=ATOL, rtol=0)
    assert fast.forwards == 1


def test_prompted_llm_weights_match_from_name(hf):
    slow = PromptedLLM(hf)
    fast = PromptedLLM(load_embedded("hf"))
    assert isinstance(fast.model, EmbeddedTransformer)
    assert [bytes(t) for t in fast.vocab] == [bytes(t) for t in slow.vocab]
    assert fast.token_maps.eos_idxs == slow.token_maps.eos_idxs
    for llm in (slow, fast):
        llm.set_prompt_from_str("The value of x is")
    rng = random.Random(3)
    contexts = [[fast.vocab[rng.randrange(len(fast.vocab))] for _ in range(n)] for n in (0, 1, 5, 9)]

    async def weights(llm):
        rows = await llm.batch_logw_next(contexts)
        return (
            np.stack([np.asarray(r.weights, dtype=np.float64) for r in rows]),
            await llm.batch_prefix(contexts),
            await llm.batch_complete(contexts),
        )

    for got, want in zip(asyncio.run(weights(fast)), asyncio.run(weights(slow))):
        np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)


def test_load_embedded_leaves_other_backends_and_cuda_to_load_model(monkeypatch):
    assert type(load_embedded("mock")).__name__ == "MockAsyncLM"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(load_model_module, "load_model", lambda name, backend, **kw: ("load_model", name, backend))
    assert load_embedded("hf") == ("load_model", EMBEDDED_MODEL, "hf")
    monkeypatch.undo()
    with pytest.raises(ValueError, match="unknown backend"):
        load_embedded("nonsense")


def test_unsupported_configuration_is_refused():
    with open(f"{model_path()}/config.json", encoding="utf-8") as fh:
        config = json.load(fh)
    with pytest.raises(ValueError, match="activation_function"):
        TinyGPT2({**config, "activation_function": "relu"}, {})


def test_cli_result_matches_the_from_name_path(capsys, monkeypatch):
    """The CLI's result through `EmbeddedTransformer` equals its result through
    `PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")` for the same seeds."""
    from genlm.control import cli

    def run(seed):
        args = ["generate", "--prompt", "The value is", "--regex", " [a-z]+\\.", "--particles", "6",
                "--max-tokens", "12", "--seed", str(seed), "--json"]
        assert cli.main(args) == 0
        return json.loads(capsys.readouterr().out)

    fast = [run(seed) for seed in (0, 1)]
    monkeypatch.setattr(cli, "_load", lambda model, backend: PromptedLLM.from_name(model, backend="hf"))
    slow = [run(seed) for seed in (0, 1)]
    for a, b in zip(fast, slow):
        assert [r["text"] for r in a["posterior"]] == [r["text"] for r in b["posterior"]]
        assert [r["probability"] for r in a["posterior"]] == pytest.approx([r["probability"] for r in b["posterior"]], abs=1e-6)
        assert a["log_ml"] == pytest.approx(b["log_ml"], abs=1e-4)


PROBE = """
import sys
from genlm.control.cli import main
code = main(sys.argv[1:])
print(code, "transformers.models.gpt2.modeling_gpt2" in sys.modules)
"""


def test_cli_run_skips_transformers_model_code():
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "generate", "--prompt", "x", "--regex", " [a-z]\\.", "--particles", "2",
         "--max-tokens", "4", "--backend", "hf"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.stdout.strip().splitlines()[-1] == "0 False", done.stdout + done.stderr


def test_command_ends_its_process_with_the_output_and_record_complete(tmp_path):
    """`python -m genlm.control` (no argv: the command itself) exits without the
    interpreter's teardown after an `EmbeddedTransformer` run: the JSON on a redirected
    stdout and the record are complete, the status is 0, nothing is on stderr."""
    out = tmp_path / "out.json"
    args = [sys.executable, "-m", "genlm.control", "generate", "--prompt", "The value is", "--regex",
            " [a-z]\\.", "--particles", "3", "--max-tokens", "6", "--seed", "0", "--backend", "hf", "--json"]
    with open(out, "w") as fh:
        done = subprocess.run([*args, "--record", str(tmp_path / "run.json")], stdout=fh, stderr=subprocess.PIPE,
                              text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    result = json.loads(out.read_text())
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["n_particles"] == 3 and record["log_ml"] == pytest.approx(result["log_ml"])


def test_end_process_flushes_and_keeps_the_status():
    code = "import sys; from genlm.control._cli_embedded import end_process; print('out', end=''); sys.stderr.write('err'); end_process(3)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out", "err")
