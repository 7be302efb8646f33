"""`multipleOf` decided exactly on decimals at a bounded cost (issue 34, finding 3):
huge exponents and long mantissas give an answer, never `decimal.Overflow` or
Python's limit on int/str conversions, and the answer is the exact rational one."""

import json
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from genlm.control import JsonSchema
from genlm.control.constraints.json_schema._json_residual import is_multiple

NEG_INF = float("-inf")
DIVISORS = ["0.5", "3", "0.1", "7", "2.5e-3", "1e20", "12", "0.0625", "6e-7", "1"]


def exact(x: Decimal, d: Decimal) -> bool:
    q = Fraction(x) / Fraction(d)
    return q.denominator == 1


@settings(max_examples=300, deadline=None)
@given(st.integers(-(10**30), 10**30), st.integers(-60, 60), st.sampled_from(DIVISORS))
def test_is_multiple_is_the_exact_quotient(m, e, d):
    x, d = Decimal(m).scaleb(e), Decimal(d)
    assert is_multiple(x, d) == exact(x, d)


# (context, multipleOf, whether a multiple): exponents far beyond Decimal's context
# (Emax 999999) and beyond 17 digits (clamped by `exact_value`, which keeps the answer:
# past a few digits of the exponent, whether m·10^k is a multiple no longer depends on k).
HUGE = [
    (b"5E+1000000", 0.5, True),
    (b"-3e9999999", 3, True),
    (b"7e1000000", 3, False),
    (b"5e+99999999999999999999999", 2, True),
    (b"5e+99999999999999999999999", 0.5, True),
    (b"1e1000000", 7, False),
    (b"1e-1000000", 0.5, False),
    (b"-5E-99999999999999999999999", 2, False),
    (b"0e-99999999999999999999999", 3, True),
    (b"1" * 6000, 3, True),  # 6000 ones: digit sum 6000
    (b"1" * 6000 + b"0", 11, True),
    (b"1" * 5999 + b"2", 3, False),  # digit sum 6001
    (b"4" * 5000 + b"e-4999", 4, False),
    (b"4" * 4997 + b"000e-3", 4, True),  # 44…4 (4997 fours), a multiple of 4
]


@pytest.mark.parametrize("ctx, d, ok", HUGE, ids=lambda v: repr(v)[:30])
async def test_huge_values_under_multiple_of_answer_exactly(ctx, d, ok):
    for schema in ({"multipleOf": d}, {"type": "number", "multipleOf": d}):
        p = JsonSchema(schema)
        assert await p.prefix(list(ctx)) == 0.0
        assert await p.complete(list(ctx)) == (0.0 if ok else NEG_INF)


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**53), 2**53), st.integers(1, 10**6))
async def test_integers_agree_with_jsonschema(n, d):
    """Where `jsonschema` answers exactly (an int instance, an int divisor), so do we."""
    schema = {"type": "integer", "multipleOf": d}
    ref = Draft202012Validator(schema).is_valid(json.loads(str(n)))
    assert (await JsonSchema(schema).complete(list(str(n).encode())) == 0.0) == ref


@pytest.mark.parametrize(
    "schema",
    [
        {"not": {"type": "integer"}},
        {"not": {"multipleOf": 3}},
        {"multipleOf": 3, "maximum": 10**1000},
    ],
)
async def test_long_integers_fail_with_an_answer(schema):
    """`jsonschema` writes the instance into its messages; an integer past Python's
    int/str conversion limit still gets an answer, not that limit's ValueError."""
    ctx = list(b"1" * 5001)  # a multiple of 3 (digit sum 5001), an integer, over the maximum
    assert await JsonSchema(schema).complete(ctx) == NEG_INF


@settings(max_examples=200, deadline=None)
@given(st.integers(-(10**12), 10**12), st.integers(-12, 12), st.sampled_from(DIVISORS))
async def test_decimals_agree_with_jsonschema_where_it_answers(m, e, d):
    """`jsonschema` on the decimal-parsed schema and instance (`instance % d` in
    Decimal arithmetic); where that raises (a quotient past its 28 digits) it does not
    answer, and the exact quotient is the reference instead."""
    from decimal import InvalidOperation

    text = f"{m}e{e}"
    schema = json.loads(json.dumps({"multipleOf": float(d)}), parse_float=Decimal)
    try:
        ref = Draft202012Validator(schema).is_valid(json.loads(text, parse_float=Decimal))
    except InvalidOperation:
        ref = exact(Decimal(text), Decimal(repr(float(d))))
    got = await JsonSchema({"multipleOf": float(d)}).complete(list(text.encode()))
    assert (got == 0.0) == ref
    assert await JsonSchema({"multipleOf": float(d)}).prefix(list(text.encode())) == 0.0
