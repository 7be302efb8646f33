"""A JSON Schema `pattern` split at its top-level `|`, each alternative with its own anchors."""

from __future__ import annotations


def _structure(pattern: str):
    """`(index, char)` of each group bracket and `|` of `pattern`, outside escapes and
    character classes."""
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i += 1
            if pattern[i:i + 1] == "^":
                i += 1
            if pattern[i:i + 1] == "]":  # a leading ] is a literal
                i += 1
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif c in "()|":
            yield i, c
        i += 1


def top_alternatives(pattern: str) -> list[str]:
    """`pattern` split at its top-level `|`: `re.search(A|B, s)` holds iff
    `re.search(A, s)` or `re.search(B, s)`, so each alternative keeps its own `^`/`$`."""
    parts, depth, start = [], 0, 0
    for i, c in _structure(pattern):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
    return parts + [pattern[start:]]


def unwrap(pattern: str) -> str:
    """`(X)` or `(?:X)` as `X` when that group spans the whole pattern and `X` is one
    alternative (its anchors then read as the pattern's)."""
    if pattern.startswith("(?:"):
        head = 3
    elif pattern.startswith("(") and not pattern.startswith("(?"):
        head = 1
    else:
        return pattern
    depth = 0
    for i, c in _structure(pattern):
        depth += (c == "(") - (c == ")")
        if depth == 0:
            if i != len(pattern) - 1:
                return pattern
            inner = pattern[head:-1]
            return inner if len(top_alternatives(inner)) == 1 else pattern
    return pattern


__all__ = ["top_alternatives", "unwrap"]
