"""The tests' toys, one copy of each (`tests/` is on the test path, see pyproject.toml).

- `toys.ab`: potentials over `AB = [b"a", b"b"]` whose SMC targets enumerate exactly
  (also importable from `toys` itself);
- `toys.core`: `Tabular`, a finite language with closed-form weights;
- `toys.tables`: `NextTable`, potentials given by seeded next-token rows;
- `toys.counted`: counting twins of stateful potentials;
- `toys.reliability`, `toys.workers`: faults, checks and worker-process potentials;
- `toys.constraints`, `toys.json_engine`: the embedded vocabulary and engine helpers;
- `toys.ray_setups`: setups and solve functions for the Ray pool tests.
"""

from toys.ab import (  # noqa: F401
    AB,
    BigramLM,
    BoolPotential,
    CountCritic,
    Failing,
    NoBB,
    Poisoned,
    PromptedToy,
    Tabular,
    ToyBackend,
    ab_lm,
    enumerate_target,
    no_bb,
    toy_backend,
)
from toys.core import Searched, segmentations  # noqa: F401
