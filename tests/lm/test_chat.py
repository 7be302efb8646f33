"""Chat prompts through the tokenizer's chat template (special tokens kept as single
ids), on the embedded model with Harmony and think-tag tokens added at test time; and a
short constrained run of that model under a Harmony condition with AWRS."""

import functools

import pytest
from toys.reasoning import THINK_TEMPLATE, save_reasoning_model

from genlm.control import AWRS, EOS, SMC, BoolFSA, HarmonyPotential, PromptedLLM
from genlm.control.lm.chat import chat_prompt_ids
from genlm.control.reasoning import answer_posterior

MESSAGES = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "Say ab."},
]


@functools.lru_cache(maxsize=None)
def _saved(folder):
    return str(save_reasoning_model(folder, seed=0))


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    return PromptedLLM.from_name(_saved(tmp_path_factory.mktemp("harmony-model")), backend="hf")


def test_messages_become_the_template_with_single_special_ids(llm):
    tok = llm.model.tokenizer
    llm.set_prompt_from_messages(MESSAGES)
    specials = {t: tok.convert_tokens_to_ids(t) for t in ("<|start|>", "<|message|>", "<|end|>")}
    ids = llm.prompt_ids
    assert ids.count(specials["<|start|>"]) == 3 and ids.count(specials["<|end|>"]) == 2
    assert llm.prompt_text() == (
        "<|start|>system<|message|>Answer briefly.<|end|>"
        "<|start|>user<|message|>Say ab.<|end|><|start|>assistant"
    )
    assert b"<|" not in b"".join(
        bytes(t) for t in llm.prompt if t.token_id not in specials.values()
    )
    llm.set_prompt_from_messages(MESSAGES, add_generation_prompt=False)
    assert llm.prompt_text().endswith("Say ab.<|end|>")


def test_template_keywords_reach_the_template(llm):
    tok = llm.model.tokenizer
    tok.chat_template, old = THINK_TEMPLATE, tok.chat_template
    try:
        ids = chat_prompt_ids(tok, MESSAGES, enable_thinking=False)
        assert tok.decode(ids).endswith("<|start|>assistant\n<think>\n\n</think>\n\n")
        assert ids.count(tok.convert_tokens_to_ids("</think>")) == 1
    finally:
        tok.chat_template = old


def test_bad_messages_and_missing_template_are_clear_errors(llm):
    with pytest.raises(TypeError, match="list of dicts"):
        llm.set_prompt_from_messages("hello")

    class NoTemplate:
        chat_template = None

    with pytest.raises(ValueError, match="no chat template"):
        chat_prompt_ids(NoTemplate(), MESSAGES)


async def test_awrs_under_a_harmony_condition_runs_on_the_model(llm):
    llm.set_prompt_from_messages(MESSAGES)
    answer = BoolFSA.from_regex(r"ab").coerce(llm, f=b"".join)
    harmony = HarmonyPotential(answer, llm.model.tokenizer, ["final"])
    with pytest.warns(UserWarning):  # the random model does not finish in 12 tokens
        seqs = await SMC(AWRS(llm, harmony, seed=0))(
            n_particles=3, max_tokens=12, ess_threshold=0.5, seed=0
        )
    assert len(seqs.contexts) == 3 and all(len(ctx) >= 5 for ctx in seqs.contexts)
    for ctx in seqs.contexts:  # every token AWRS accepted kept the output in the format
        tokens = [t for t in ctx if t is not EOS]  # (SMC ends with EOS at max_tokens)
        assert harmony.harmony_chat.validate_harmony_format(tokens)
    post = answer_posterior(seqs, harmony)
    assert set(post) <= {"ab"}
