"""Alias of `genlm.control._returns`, the home of the return-value checks; it re-exports their names."""

from genlm.control._returns import CHECKS, SAMPLER_CHECKS, check_returns

__all__ = ["CHECKS", "SAMPLER_CHECKS", "check_returns"]
