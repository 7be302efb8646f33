"""A genlm-grammar WFSA over byte values compiled to arrays for incremental scoring.

With forward vector `α` (weights of reaching each state after the context), one
transition matrix `T_b` per byte, stop weights `ρ` and backward weights
`β = Σ_k (Σ_b T_b)^k ρ` (the total weight of finishing from each state):

    prefix(ctx)        = α · β
    complete(ctx)      = α · ρ
    prefix(ctx + [b])  = α · (T_b β) = (α M)[b],   M[:, b] = T_b β,  M[:, 256] = ρ

so a whole `logw_next` row is one vector–matrix product `α M`, and extending the
context by a byte is one sparse product `α T_b`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from genlm.control.constraints.regex.automaton import N_BYTES, weight_to_float

if TYPE_CHECKING:  # scipy is imported on use: it costs a quarter second, and a
    import scipy.sparse as sp  # regex that fails to parse never needs it

@dataclass(frozen=True, eq=False)
class ByteAutomaton:
    """Array form of a weighted automaton over bytes (see module docstring).

    Attributes:
        start: initial weights `α₀`, shape (n,).
        stop: stop weights `ρ`, shape (n,).
        trans: per byte, the sparse matrix `T_b` (n × n), or None when no arc has label `b`;
            None for an automaton built from a DFA (`dfa_automaton`), which steps by `delta`.
        beta: backward weights `β`, shape (n,).
        next_mass: `M`, shape (n, 257).
        boolean: whether only the support of the weights matters.
        delta: for a deterministic automaton, `delta[q, b]` is the state after byte
            `b` from `q` (-1: none); None otherwise.
        log_arc: for a deterministic automaton, `log T_b[q, delta[q, b]]`.
    """

    start: np.ndarray
    stop: np.ndarray
    trans: tuple
    beta: np.ndarray
    next_mass: np.ndarray
    boolean: bool
    delta: np.ndarray | None = None
    log_arc: np.ndarray | None = None

    @property
    def n_states(self) -> int:
        return len(self.start)


def _labels(wfsa) -> None:
    for a in wfsa.alphabet:
        if not (isinstance(a, (int, np.integer)) and 0 <= a < N_BYTES):
            raise ValueError(
                f"arc label {a!r} is not a byte value 0..255 (convert a character "
                "automaton with `.to_bytes()`)"
            )


def _prepare(wfsa):
    from genlm.grammar import EPSILON

    if any(a == EPSILON for a in wfsa.alphabet):
        wfsa = wfsa.epsremove
    if any(isinstance(a, str) for a in wfsa.alphabet):
        wfsa = wfsa.to_bytes()
        if any(a == EPSILON for a in wfsa.alphabet):
            wfsa = wfsa.epsremove
    _labels(wfsa)
    return wfsa


def _support_closure(adj: sp.csr_matrix, seed: np.ndarray) -> np.ndarray:
    """States reachable from `seed` along `adj` (boolean iteration to a fixpoint)."""
    reach = seed.copy()
    while True:
        nxt = reach | (adj.T @ reach.astype(np.float64) > 0)
        if (nxt == reach).all():
            return reach
        reach = nxt


def compile_wfsa(wfsa, boolean: bool) -> ByteAutomaton:
    """Compile a genlm-grammar WFSA (byte-value or character labels) to arrays.

    States that cannot be reached or cannot finish are dropped.

    Raises:
        ValueError: on labels that are not bytes, a negative weight, or a total
            weight that diverges (spectral radius of `Σ_b T_b` ≥ 1).
    """
    import scipy.sparse as sp

    wfsa = _prepare(wfsa)
    states = list(wfsa.states)
    ids = {q: i for i, q in enumerate(states)}
    n = len(states)
    start, stop = np.zeros(n), np.zeros(n)
    for q, w in wfsa.I:
        start[ids[q]] += weight_to_float(w)
    for q, w in wfsa.F:
        stop[ids[q]] += weight_to_float(w)
    src, dst, lab, val = [], [], [], []
    for i, a, j, w in wfsa.arcs():
        src.append(ids[i]), dst.append(ids[j]), lab.append(int(a)), val.append(weight_to_float(w))
    src, dst, lab = (np.asarray(x, dtype=np.int64) for x in (src, dst, lab))
    val = np.asarray(val, dtype=np.float64)
    if (start < 0).any() or (stop < 0).any() or (val < 0).any():
        raise ValueError("automaton weights must be non-negative")
    if boolean:
        start, stop, val = (start > 0) * 1.0, (stop > 0) * 1.0, (val > 0) * 1.0
    if n == 0:
        raise ValueError("the automaton has no states")
    adj = sp.csr_matrix(((val > 0) * 1.0, (src, dst)), shape=(n, n))
    fwd = _support_closure(adj, start > 0)
    bwd = _support_closure(adj.T.tocsr(), stop > 0)
    keep = np.flatnonzero(fwd & bwd)
    if len(keep) == 0:
        raise ValueError("the automaton accepts no string")
    remap = np.full(n, -1)
    remap[keep] = np.arange(len(keep))
    ok = (remap[src] >= 0) & (remap[dst] >= 0) & (val > 0)
    src, dst, lab, val = remap[src[ok]], remap[dst[ok]], lab[ok], val[ok]
    return _assemble(start[keep], stop[keep], src, dst, lab, val, boolean)


def _assemble(start, stop, src, dst, lab, val, boolean) -> ByteAutomaton:
    import scipy.sparse as sp

    n = len(start)
    trans = []
    for b in range(N_BYTES):
        sel = lab == b
        trans.append(
            sp.csr_matrix((val[sel], (src[sel], dst[sel])), shape=(n, n)) if sel.any() else None
        )
    total = sp.csr_matrix((val, (src, dst)), shape=(n, n))
    beta = _backward(total, stop, boolean)
    mass = np.zeros((n, N_BYTES + 1))
    for b, t in enumerate(trans):
        if t is not None:
            mass[:, b] = t @ beta
    mass[:, N_BYTES] = stop
    if boolean:
        mass = (mass > 0) * 1.0
    delta, log_arc = _deterministic_tables(start, src, dst, lab, val, n)
    return ByteAutomaton(start, stop, tuple(trans), beta, mass, boolean, delta, log_arc)


def dfa_automaton(delta: np.ndarray, final: np.ndarray, boolean: bool) -> ByteAutomaton:
    """The `ByteAutomaton` of a trimmed byte DFA (initial state 0, every state live)
    whose state `q` splits its mass evenly over its `k_q` choices (outgoing bytes plus
    stopping, when final): `T_b[q, δ(q, b)] = ρ[q] = 1/k_q`.

    Every state is live, so the process stops with probability 1 and `β = 1`; the
    arrays are built directly, in time linear in `n · 256`, with no linear solve, and
    without the per-byte matrices (`trans` is None: a DFA steps through `delta`).
    """
    n = len(final)
    has = delta >= 0
    k = has.sum(axis=1) + final
    w = np.ones(n) if boolean else 1.0 / k
    start = np.zeros(n)
    start[0] = 1.0
    stop = np.where(final, w, 0.0)
    mass = np.zeros((n, N_BYTES + 1))
    mass[:, :N_BYTES] = np.where(has, w[:, None], 0.0)
    mass[:, N_BYTES] = stop
    with np.errstate(divide="ignore"):
        log_arc = np.where(has, np.log(w)[:, None], -np.inf)
    return ByteAutomaton(start, stop, None, np.ones(n), mass, boolean, delta, log_arc)


def _deterministic_tables(start, src, dst, lab, val, n):
    """`(delta, log_arc)` when the automaton is deterministic, else `(None, None)`."""
    if np.count_nonzero(start) != 1:
        return None, None
    delta = np.full((n, N_BYTES), -1, dtype=np.int64)
    log_arc = np.full((n, N_BYTES), -np.inf)
    pairs = src * N_BYTES + lab
    if len(np.unique(pairs)) != len(pairs):
        return None, None
    delta[src, lab] = dst
    with np.errstate(divide="ignore"):
        log_arc[src, lab] = np.log(val)
    return delta, log_arc


def _backward(total: sp.csr_matrix, stop: np.ndarray, boolean: bool) -> np.ndarray:
    if boolean:
        return _support_closure(total.T.tocsr(), stop > 0) * 1.0
    dense = total.toarray()
    if len(dense) and np.max(np.abs(np.linalg.eigvals(dense))) >= 1 - 1e-12:
        raise ValueError(
            "the automaton's total weight diverges (its arc weights have spectral "
            "radius ≥ 1), so prefix weights are infinite"
        )
    return np.linalg.solve(np.eye(len(dense)) - dense, stop)


__all__ = ["ByteAutomaton", "compile_wfsa", "dfa_automaton", "weight_to_float", "N_BYTES"]
