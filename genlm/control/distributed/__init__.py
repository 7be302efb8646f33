"""Many SMC problems over a pool of Ray actors (the optional `ray` extra).

    pip install "genlm-control[ray]"

A `Pool` starts Ray actors (one model replica each: a GPU, a group of GPUs for a
tensor-parallel model, or CPUs), runs the caller's `setup()` once in each, and solves
problems with the caller's `async def solve(state, problem, seed)`, up to
`concurrency` at a time per actor under one event loop, so their `smc` calls share
the model's batched forwards:

    from genlm.control.distributed import Pool

    def setup():                            # once per actor
        return PromptedLLM.from_name("meta-llama/Llama-3.2-1B")

    async def solve(llm, question, seed):   # many times per actor, concurrently
        llm = llm.spawn()
        llm.set_prompt_from_str(question)
        return await direct_token_sampler(llm).smc(8, 0.5, 32, seed=seed)

    async with Pool(setup, gpus_per_actor=1) as pool:
        async for result in pool.map(solve, questions):
            print(result.index, result.value.decoded_posterior if result.ok else result.error)

Guarantees:

- Seeds: problem `i` gets `seeds[i]` (default `problem_seeds(n, base_seed)[i]`), so its
  result does not depend on the number of actors or on which one served it.
- Each problem yields exactly one `Result`: its value, or the traceback of what `solve`
  raised (the other problems go on). An actor that dies (killed, out of memory) is
  replaced (its `setup()` runs again) and its unfinished problems are resubmitted, each
  alone on its actor; a problem whose actors die `max_retries + 1` times yields an
  `"ActorDied"` error, and the problems it took down with it finish.
- Leaving `map` early or cancelling it cancels the calls in flight; `close()` (or the
  end of `async with`) kills the actors.
- Bad input fails before any actor starts: an unpicklable `setup`/`solve`, a `solve`
  that is not `async`, more GPUs or CPUs than the cluster has, seeds of the wrong
  length, Ray not installed.

Importing this module does not import Ray; `genlm.control` never imports this module.
"""

from genlm.control.distributed._pool import Pool
from genlm.control.distributed._records import ProblemFailed, Result, SetupFailed, problem_seeds

__all__ = ["Pool", "ProblemFailed", "Result", "SetupFailed", "problem_seeds"]
