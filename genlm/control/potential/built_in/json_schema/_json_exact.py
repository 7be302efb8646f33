"""Alias of `genlm.control.potential.built_in.engine._json_exact`, where this module moved (engine/ owns translations into the engine's terms)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("genlm.control.potential.built_in.engine._json_exact")
