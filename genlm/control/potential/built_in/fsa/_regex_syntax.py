"""Alias of `genlm.control.potential.built_in.regex.syntax`, where this module moved (shared by fsa/, cfg/, json_schema/ and engine/)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("genlm.control.potential.built_in.regex.syntax")
