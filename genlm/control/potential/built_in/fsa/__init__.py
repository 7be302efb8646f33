"""Regular-language potentials: `WFSA` / `BoolFSA` over bytes, the regex syntax and
its compiler to byte automata (flat arrays), and the coercion that walks a DFA.

Submodules are imported on demand; the public names are exported lazily by
`genlm.control.potential.built_in`.
"""
