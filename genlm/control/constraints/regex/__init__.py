"""The regular-expression foundation that fsa/, cfg/, json_schema/ and engine/ share:
`syntax` (a Python pattern read into a tree of character sets, with limits),
`compile` (that tree compiled to a byte-level DFA under a state budget) and
`automaton` (the byte alphabet and semiring weights as reals).

Depends on no other subpackage of `constraints`. Submodules are imported on demand.
"""
