"""`SMC`, the front door of the algorithm: it checks its arguments and runs the driver."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from genlm.control._args import positive_int
from genlm.control._cleanup import Cleaned, cleaned
from genlm.control._held import holding
from genlm.control._warn import warn_user
from genlm.control.potential.base import Potential
from genlm.control.sampler.token import TokenSampler
from genlm.control.smc.driver import check_args, smc_standard
from genlm.control.smc.particle import SequenceModel
from genlm.control.smc.record_file import check_output_path
from genlm.control.smc.resampling import get_resampler
from genlm.control.smc.sequences import Sequences
from genlm.control.typing import Sequence as SequenceType


class SMCArgumentError(TypeError, ValueError):
    """`SMC` given something that is not a unit sampler, or a critic that is not a
    `Potential`: a `TypeError` (ours) and a `ValueError` (what 0.4.1 raised)."""


class SMC:
    """Sequential Monte Carlo over sequences grown by a unit sampler.

    Each step extends every live particle by one unit from `unit_sampler`
    (multiplying in its properly weighted importance weight) and, with a
    `critic`, replaces the particle's twist by `critic.score` of the new context;
    the population is resampled when its ESS falls below `ess_threshold · n`.
    Particles stop at EOS, at `max_tokens` (EOS forced with the `logw_eos`
    correction) or when `terminate_when` holds. The returned sequences are
    properly weighted for `target.complete(x) · critic.complete(x)` over sequences
    of at most `max_tokens` units (EOS included), and `log_ml` estimates the log
    of its normalizing constant, unbiased on the exp scale.

    Args:
        unit_sampler: a `TokenSampler` (or a multi-token unit sampler).
        critic: optional potential over the sampler's tokens.
        autobatch: serve the particles' concurrent critic calls as batches.

    Raises:
        SMCArgumentError (a TypeError and a ValueError): `unit_sampler` is not a
            `TokenSampler`, or `critic` is not a `Potential`.
        ValueError: if the critic's token type differs from the sampler's.
    """

    def __init__(self, unit_sampler: TokenSampler, critic: Potential | None = None, autobatch: bool = True):
        if not isinstance(unit_sampler, TokenSampler):
            raise SMCArgumentError(
                f"unit_sampler must be a TokenSampler, got {type(unit_sampler).__name__}"
            )
        if critic is not None:
            if not isinstance(critic, Potential):
                raise SMCArgumentError(f"critic must be a Potential, got {type(critic).__name__}")
            _check_token_types(unit_sampler, critic)
            if autobatch:
                critic = critic.to_autobatched()
        self.unit_sampler = unit_sampler
        self.critic = critic

    async def __call__(
        self,
        n_particles: int,
        ess_threshold: float,
        max_tokens: int,
        *,
        verbosity: int = 0,
        json_path: str | None = None,
        resampling_method: str = "multinomial",
        terminate_when: Callable[[list], bool] | None = None,
        seed: int | None = None,
        budget_aware: bool = True,
        end_twist: float | bool | None = None,
    ) -> "Sequences":
        """Run SMC and return the weighted sequences.

        Args:
            n_particles: number of particles.
            ess_threshold: resample when `ess < ess_threshold · n_particles`
                (0 never resamples, 1 resamples at every step).
            max_tokens: bound on every sequence's length, EOS included.
            verbosity: 1 prints the particles after each step.
            json_path: write a record of the run there (see `InferenceVisualizer`). The
                path is checked before sampling (its folder exists and is writable; it
                is not a directory, a symbolic link or a special file). If writing still
                fails after the run, a `RecordNotWrittenWarning` names the cause and the
                result is returned all the same, its record in `sequences.record`.
            resampling_method: 'multinomial', 'stratified', 'systematic' or 'residual'.
            terminate_when: a plain (not async) function of a particle's context; the
                particle stops when it returns true.
            seed: makes the run reproducible bit for bit.
            budget_aware: a token sampler draws only tokens after which the target can
                still end within `max_tokens` (exact for regular expressions and
                automata, a lower bound elsewhere; see `genlm.control.sampler.budget`).
                The target, conditioned on that length, is the same either way, so it
                changes no expectation; it removes particles that would die at
                `max_tokens`. False draws from the unpruned rows.
            end_twist: how resampling charges an unfinished particle for the ending it
                has not paid yet; the charge is taken off when it finishes, so it changes
                no expectation (`log_ml` stays unbiased for the same `Z`: twisted SMC with
                a twist that is 1 at the end). It keeps finished particles, which have
                paid for EOS, from being resampled away by unfinished ones that have not.
                None (the default): for AWRS and for the direct sampler of a product
                (`llm * condition`), the cost of ending after the particle's own context,
                the EOS entry of the model's next-token row there (a condition's entry
                adds nothing), clipped to `[1e-9, 1]`; a lone potential, which prices its
                own prefixes, and other samplers get no charge. A number in `(0, 1]`: that
                constant factor on every unfinished particle. False or 1: no twist. It
                does nothing at `ess_threshold=0`. See docs/smc.md ("When a few runs
                carry the mean").

        Raises:
            ValueError: for a bad argument, or a `+inf` log weight during the run.
            TypeError: a bool where a number is expected; a `terminate_when` that is
                not a plain function.
        """
        positive_int("max_tokens", max_tokens)
        if isinstance(verbosity, bool) or not isinstance(verbosity, (int, np.integer)):
            raise TypeError(f"verbosity must be an integer, got {verbosity!r}")
        if json_path is not None:
            check_output_path(json_path)
        get_resampler(resampling_method)
        if not isinstance(budget_aware, (bool, np.bool_)):
            raise TypeError(f"budget_aware must be True or False, got {budget_aware!r}")
        end_log = _end_twist_log(end_twist)
        # Without resampling, or with a critic that weighs only finished sequences,
        # twisting changes no final weight: the critic is applied once, at the end.
        check_args(n_particles, ess_threshold)
        twist = ess_threshold > 0 and self.critic is not None and not self.critic.is_terminal_only()
        model = SequenceModel(
            self.unit_sampler,
            self.critic,
            int(max_tokens),
            twist_with_critic=twist,
            terminate_when=terminate_when,
            budget_aware=bool(budget_aware),
            end_twist=end_log if ess_threshold > 0 else 0.0,
        )
        # The run holds its models: a shared PromptedLLM's prompt cannot change under it.
        with holding(self.unit_sampler, self.critic) as held:
            pop = await smc_standard(
                model,
                n_particles,
                ess_threshold,
                resampling_method,
                json_path,
                seed=seed,
                verbosity=verbosity,
                prompt=_prompt_text(held) if json_path is not None else None,
            )
        return Sequences(
            pop.contexts,
            pop.log_weights,
            record=pop.record,
            deaths=pop.deaths,
            ess_before_resample=pop.ess_before_resample,
        )

    def cleanup(self) -> Cleaned:
        """Release the sampler's and the critic's resources (awaitable, or not)."""
        critic = None if self.critic is None else self.critic.cleanup()
        return cleaned(self.unit_sampler.cleanup(), critic)


def _prompt_text(held: list) -> str | None:
    """The prompt of the run's models, for its record: their one prompt text, or None
    (no model with a prompt, or models with different prompts)."""
    texts = {text for text in (obj.prompt_text() for obj in held) if text is not None}
    return texts.pop() if len(texts) == 1 else None


def _check_token_types(unit_sampler: TokenSampler, critic: Potential) -> None:
    ours, theirs = unit_sampler.token_type, critic.token_type
    if ours == theirs:
        _check_critic_vocabulary(unit_sampler.target, critic)
        return
    if isinstance(ours, SequenceType) and ours.element_type == theirs:
        return
    hint = ""
    if isinstance(theirs, SequenceType) and theirs.element_type == ours:
        hint = " (coerce the critic to the sampler's tokens with `critic.coerce(...)`)"
    raise ValueError(
        f"the critic's token type {theirs!r} differs from the sampler's {ours!r}{hint}"
    )


def _check_critic_vocabulary(target: Potential, critic: Potential) -> None:
    """The critic scores the contexts the sampler produces: a critic sharing no token
    with the sampler is an error; one lacking some tokens gets a warning (a coerced
    critic may be pruned yet still score every context through its map)."""
    if target.tables is critic.tables:
        return
    lookup = critic.lookup
    missing = [x for x in target.vocab if x not in lookup]
    if len(missing) == len(target.vocab):
        raise ValueError(
            f"the critic's vocabulary shares no token with the sampler's (e.g. {missing[:3]!r} "
            "are missing); build the critic over the sampler's vocabulary or coerce it"
        )
    if missing:
        warn_user(
            f"the critic's vocabulary lacks {len(missing)} of the sampler's tokens "
            f"(e.g. {missing[:3]!r}); it must still score contexts containing them",
        )


def _end_twist_log(end_twist: Any) -> float | None:
    """The model's `end_twist`: None for the default (the cost of ending, per
    particle), 0 for none (`False` or 1), else `log end_twist`.

    Raises:
        TypeError: not None, False or a real number (True included).
        ValueError: a number outside `(0, 1]`.
    """
    if end_twist is None:
        return None
    if end_twist is False:
        return 0.0
    if isinstance(end_twist, (bool, np.bool_)) or not isinstance(end_twist, (int, float, np.integer, np.floating)):
        raise TypeError(f"end_twist must be None, False or a number in (0, 1], got {end_twist!r}")
    if not 0 < float(end_twist) <= 1:
        raise ValueError(f"end_twist must be in (0, 1], got {end_twist!r}")
    return math.log(float(end_twist))


__all__ = ["SMC"]

