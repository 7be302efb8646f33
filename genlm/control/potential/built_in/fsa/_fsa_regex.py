"""Alias of `genlm.control.potential.built_in.regex.compile`, where this module moved (shared by fsa/, cfg/ and json_schema/)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("genlm.control.potential.built_in.regex.compile")
