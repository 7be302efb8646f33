"""Regular-language potentials: `WFSA` / `BoolFSA` over bytes (flat arrays), and the
coercion that walks a DFA. The regex syntax and its compiler are the shared
`constraints/regex/` package.

Submodules are imported on demand; the public names are exported lazily by
`genlm.control.potential.built_in`.
"""
