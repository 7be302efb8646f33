"""Context-free potentials: `WCFG` / `BoolCFG` (Earley parsing over bytes), the Lark
grammar reader, and the check that a Lark grammar can be served exactly by the
compiled engine.

Submodules are imported on demand; the public names are exported lazily by
`genlm.control.potential.built_in`.
"""
