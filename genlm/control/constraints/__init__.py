"""The languages a generation is constrained to, as Boolean and weighted potentials over
bytes: regular expressions (`regex/`, the shared syntax and compiler), automata
(`fsa/`: `WFSA`, `BoolFSA`), grammars (`cfg/`: `WCFG`, `BoolCFG`, the Lark reader) and
JSON Schema (`json_schema/`: `JsonSchema`), with their shared recognizer
(`recognizer`) and per-state row helpers.

Above the algebra (`potential/`), below the compiled engine (`engine/`, which reads
their raw sources) and the language models (`lm/`); imports neither. Submodules are
imported on demand; the public names are exported lazily by `genlm.control`.
"""
