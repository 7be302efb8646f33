"""Record an SMC run and render it with `InferenceVisualizer`.

    python examples/visualize_record.py [OUT_DIR]

`json_path=` makes SMC write a record of every step (the particles' texts, log
weights, ESS and resampling ancestors). `InferenceVisualizer` turns the record into
one self-contained HTML page that steps through the run.
"""

import asyncio
import sys
import tempfile
from pathlib import Path

from genlm.control import AWRS, BoolFSA, InferenceVisualizer, PromptedLLM
from genlm.control.embedded import EMBEDDED_MODEL
from genlm.control.smc.record import RunRecord


async def main(out_dir: str | None = None, seed: int = 0):
    out = Path(out_dir or tempfile.mkdtemp(prefix="genlm_record_"))
    out.mkdir(parents=True, exist_ok=True)
    record_path = out / "smc_record.json"

    llm = PromptedLLM.from_name(EMBEDDED_MODEL)
    llm.set_prompt_from_str("The value of x is")
    number = BoolFSA.from_regex(r" [0-9]+\.").coerce(llm, f=b"".join)
    sampler = AWRS(llm, number)
    await sampler.smc(
        n_particles=8, ess_threshold=0.9, max_tokens=12, seed=seed, json_path=str(record_path)
    )

    record = RunRecord.from_json(record_path)
    resampled = [s.step for s in record.steps if s.resampled]
    print(f"{len(record.steps)} steps, resampled at steps {resampled}, log_ml {record.log_ml:.3f}")
    for s in record.steps:
        print(f"  step {s.step}: ESS {s.ess:5.2f} of {record.n_particles}")

    page = out / "smc_record.html"
    InferenceVisualizer(record_path).to_html(page)
    print(f"open {page.resolve().as_uri()} in a browser")
    return page


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None))
