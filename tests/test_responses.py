"Degenerate responses (rl_notes.responses): properties of the loop rule and the rates over any texts."
from hypothesis import given, strategies as st
from rl_notes.responses import loop_tail, is_loop, is_empty, degenerate_rates, LOOP_RULE

texts = st.text(alphabet="ab1 .=", max_size=80)

@given(texts)
def test_loop_tail_is_a_repetition_at_the_end(t):
    p, k = loop_tail(t)
    if not t: assert (p, k) == (0, 0); return
    assert 1 <= p and 1 <= k and p * k <= len(t)
    block = t[len(t) - p:]
    assert t.endswith(block * k)

@given(st.text(alphabet="abc", min_size=1, max_size=5), st.integers(min_value=4, max_value=40))
def test_a_block_repeated_to_the_end_is_a_loop_once_long_enough(block, k):
    t = block * k
    assert is_loop(t) == (len(t) >= LOOP_RULE["min_span"])   # >= 4 copies covering the whole text: only the span can fail

@given(st.lists(texts, max_size=20))
def test_rates_are_shares(ts):
    r = degenerate_rates(ts)
    assert 0.0 <= r["empty_frac"] <= 1.0 and 0.0 <= r["loop_frac"] <= 1.0
    if ts: assert r["empty_frac"] == sum(map(is_empty, ts)) / len(ts)

def test_a_prefix_that_is_not_repeated_does_not_matter():
    assert is_loop("the answer: " + "go " * 10) and not is_loop("go " * 10 + "the answer is 12")
