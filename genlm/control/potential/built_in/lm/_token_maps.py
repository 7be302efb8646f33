"""Alias of `genlm.control.potential.built_in.lm.token_maps`, the module's public name (engine/ reads it too)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("genlm.control.potential.built_in.lm.token_maps")
