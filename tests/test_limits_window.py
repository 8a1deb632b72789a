"""The limiter's arithmetic (``cuca.limits.window``), I/O-free: what each pure change of
the shared state promises (docs/limits.md; the module's docstring), checked one by one
and fast (no server, no clock). The limiter's behaviour over loopback is
tests/test_limits.py's."""

from __future__ import annotations

from typing import Any

import pytest

from cuca.limits import window

REQUESTS = window.Bucket("requests_per_minute", 60, 1)  # one a second
REQUEST = {"requests": 1}
NOW = 1000.0  # a clock far from 0: a sum and a difference of it and a slot differ


def waits(state: Any, now: float, turns: int, costs: Any, server: Any = None) -> list[float]:
    """The waits of ``turns`` turns asking at ``now``, one after the other."""
    found = []
    for _ in range(turns):
        state, reservation = window.reserve(state, now, costs, None, server=server)
        found.append(reservation.wait)
    return found


def test_window_a_turn_that_need_not_wait_names_no_limit() -> None:
    """A fresh limiter admits the first turn at once, and says no limit held it; a
    turn that may not wait at all (``max_waiters`` reached) is still admitted when it
    need not wait."""
    _, first = window.reserve(None, NOW, {REQUESTS: 1}, None)
    assert first == window.Reservation(0.0, None)
    state, paced = window.reserve(window.pace(None, NOW, "requests", 4, 8.0), NOW, {}, None,
                                  server=REQUEST)
    assert paced == window.Reservation(0.0, None)
    _, at_once = window.reserve(None, NOW, {REQUESTS: 1}, 0.0, may_wait=False)
    assert at_once == window.Reservation(0.0, None)
    _, again = window.reserve(state, NOW, {REQUESTS: 1}, 0.0, may_wait=False, server=REQUEST)
    assert again.refused and again.limit == "server" and again.wait == pytest.approx(2.0)


def test_window_a_pause_names_the_server_and_ends_at_its_time() -> None:
    """A turn held by the server's pause waits for it, and the refusal or the wait
    names ``server``; at the pause's end a turn goes at once, held by nothing."""
    state = window.pause(None, NOW + 5.0, None)
    _, held = window.reserve(state, NOW, {REQUESTS: 1}, None)
    assert held == window.Reservation(5.0, "server")
    _, at_end = window.reserve(state, NOW + 5.0, {REQUESTS: 1}, None)
    assert at_end == window.Reservation(0.0, None)


def test_window_pacing_names_the_server_and_sends_none_early() -> None:
    """10 requests remain until a reset in 1 s: the next turns go 0.1 s apart, held by
    ``server``, and the eleventh waits for the reset itself, not a float's rounding
    before it (ten gaps of 0.1 s add up to 0.9999999999999999 s)."""
    state: Any = window.pace(None, 0.0, "requests", 10, 1.0)
    found = []
    for _ in range(11):
        state, reservation = window.reserve(state, 0.0, {}, None, server=REQUEST)
        found.append(reservation)
    assert found[0] == window.Reservation(0.0, None)
    assert all(r.limit == "server" for r in found[1:])
    assert found[-1].wait >= 1.0  # no request beyond the 10 goes before the reset


def test_window_refund_gives_back_the_cost_at_the_buckets_interval() -> None:
    """30 a minute (2 s apart): a turn cancelled while waiting gives its 2 s back, so
    the next turn takes its place, not the one after it."""
    requests = window.Bucket("requests_per_minute", 30, 1)
    state, _ = window.reserve(None, NOW, {requests: 1}, None)
    state, second = window.reserve(state, NOW, {requests: 1}, None)
    assert second.wait == pytest.approx(2.0)
    state, _ = window.refund(state, {requests: 1})
    _, third = window.reserve(state, NOW, {requests: 1}, None)
    assert third.wait == pytest.approx(2.0)


def test_window_refund_gives_back_its_own_place_in_the_servers_pacing() -> None:
    """Three turns queued 2 s apart by the server's pacing; the last is cancelled: when
    the server then says again that 4 remain until a reset in 8 s, the two still
    queued (at 0 s and 2 s) are counted, not the cancelled one (at 4 s)."""
    state: Any = window.pace(None, 0.0, "requests", 4, 8.0)
    slots = []
    for _ in range(3):
        state, reservation = window.reserve(state, 0.0, {}, None, server=REQUEST)
        slots.append(reservation.wait)
    assert slots == [0.0, 2.0, 4.0]
    state, _ = window.refund(state, {}, 4.0, REQUEST)
    state = window.pace(state, 0.0, "requests", 4, 8.0)
    _, next_turn = window.reserve(state, 0.0, {}, None, server=REQUEST)
    assert next_turn.wait == pytest.approx(4.0)  # after the two queued, 2 s apart


def test_window_hold_moves_a_waiters_place_to_the_pauses_end() -> None:
    """A waiter whose slot comes during a pause waits for the pause's end, and its
    place in the queue moves there: the server then saying 2 requests remain until a
    reset in 30 s (15 s apart) counts it once, at the pause's end (the next turn goes
    15 s after it), not twice."""
    state, _ = window.reserve(None, NOW, {}, None, server=REQUEST)
    state = window.pause(state, NOW + 5.0, None)
    state, held = window.hold(state, NOW, NOW, REQUEST)
    assert held == NOW + 5.0
    state = window.pace(state, NOW, "requests", 2, 30.0)
    _, next_turn = window.reserve(state, NOW, {}, None, server=REQUEST)
    assert next_turn.wait == pytest.approx(20.0)


def test_window_pacing_counts_only_what_queued_turns_cost_on_that_limit() -> None:
    """A turn queued that costs nothing on the server's token limit does not hold the
    turns paced on it: 1,000 tokens remain until a reset in 10 s, and a turn of 100
    tokens asking just after one of requests only goes at once."""
    state, _ = window.reserve(None, NOW, {}, None, server=REQUEST)
    state = window.pace(state, NOW, "tokens", 1000, 10.0)
    _, tokens = window.reserve(state, NOW, {}, None, server={"tokens": 100})
    assert tokens == window.Reservation(0.0, None)


def test_window_pacing_starts_after_a_queued_turns_own_gap() -> None:
    """A turn queued until a pause ends at 10 s; the server then says 20 requests
    remain until a reset in 40 s (2 s apart): the next turn goes a gap after the queued
    one, at 12 s."""
    state = window.pause(None, NOW + 10.0, None)
    state, first = window.reserve(state, NOW, {}, None, server=REQUEST)
    assert first.wait == pytest.approx(10.0)
    state = window.pace(state, NOW, "requests", 20, 40.0)
    _, second = window.reserve(state, NOW, {}, None, server=REQUEST)
    assert second.wait == pytest.approx(12.0)


def test_window_pacing_again_keeps_the_spacing_of_turns_that_went() -> None:
    """4 requests remain until a reset in 8 s (2 s apart); a turn goes at once. A
    second later, the server (which had not counted it yet) says 4 remain again: the
    next turn still keeps its 2 s from the one that went."""
    state = window.pace(None, NOW, "requests", 4, 8.0)
    state, first = window.reserve(state, NOW, {}, None, server=REQUEST)
    assert first.wait == 0
    state = window.pace(state, NOW + 1.0, "requests", 4, 7.0)
    _, second = window.reserve(state, NOW + 1.0, {}, None, server=REQUEST)
    assert second.wait == pytest.approx(1.0)


def test_window_forgets_the_servers_pacing_after_its_reset() -> None:
    """Past the server's reset its pacing is gone from the shared state (only the
    configured limits space turns again), and the state keeps only its documented
    parts (buckets, pause, leases, pacing, queue)."""
    state = window.pace(None, NOW, "requests", 4, 8.0)
    state, _ = window.reserve(state, NOW + 9.0, {REQUESTS: 1}, None)
    assert state["s"] == {}
    assert set(state) == {"b", "p", "l", "s", "q"}


def test_window_charge_counts_output_from_now_after_an_idle_spell() -> None:
    """60 output tokens a minute (a minute's worth at once): 120 charged in two parts
    (1, then 119) after the bucket sat idle for 100 s fill it from now, so the next turn
    waits 60 s for them to drain, whatever the bucket held before; a charge on a
    bucket never used before counts the same."""
    output = window.Bucket("output_tokens_per_minute", 60, 60)
    state, _ = window.reserve(None, 0.0, {output: 0}, None)  # the bucket, empty at 0
    state = window.charge(state, 100.0, {output: 1})
    state = window.charge(state, 100.0, {output: 119})
    _, after = window.reserve(state, 100.0, {output: 0}, None)
    assert after.wait == pytest.approx(60.0) and after.limit == "output_tokens_per_minute"
    fresh = window.charge(None, 100.0, {output: 120})
    _, first = window.reserve(fresh, 100.0, {output: 0}, None)
    assert first.wait == pytest.approx(60.0)


def test_window_pause_keeps_every_other_limit() -> None:
    """A pause holds every turn until its end and keeps what the state held: the
    concurrency slots taken, the input tokens reserved."""
    tokens = window.Bucket("input_tokens_per_minute", 60, 60)
    state, taken = window.lease(None, NOW, "a", 1, 600.0)
    assert taken
    state, _ = window.reserve(state, NOW, {tokens: 60}, None)  # a minute's worth
    state = window.pause(state, NOW + 0.5, REQUESTS)
    _, other = window.lease(state, NOW, "b", 1, 600.0)
    assert not other  # the slot is still taken
    _, next_turn = window.reserve(state, NOW, {tokens: 1}, None)
    assert next_turn.wait == pytest.approx(1.0)  # its token's second, past the pause


def test_window_pause_never_shortens_the_spacing_reserved() -> None:
    """Six a minute (10 s apart), three turns reserved up to 30 s ahead: a pause of 5 s
    does not let the next turn go before its place at 30 s; and a fresh limiter paused
    half a second holds its next turn half a second, not more."""
    slow = window.Bucket("requests_per_minute", 6, 1)
    state: Any = None
    for _ in range(3):
        state, _ = window.reserve(state, NOW, {slow: 1}, None)
    state = window.pause(state, NOW + 5.0, slow)
    _, fourth = window.reserve(state, NOW, {slow: 1}, None)
    assert fourth.wait == pytest.approx(30.0)
    _, short = window.reserve(window.pause(None, 0.5, REQUESTS), 0.0, {REQUESTS: 1}, None)
    assert short.wait == pytest.approx(0.5)


def test_window_after_a_pause_turns_are_spaced_as_usual_without_a_burst() -> None:
    """30 a minute with a burst of 3, paused until 10 s: after the pause, the turns go
    one interval apart from its end (10, 12, 14 s), not three at once."""
    bursty = window.Bucket("requests_per_minute", 30, 3)
    state = window.pause(None, NOW + 10.0, bursty)
    assert waits(state, NOW, 3, {bursty: 1}) == pytest.approx([10.0, 12.0, 14.0])


def test_window_release_after_the_slot_expired_changes_nothing() -> None:
    """A turn that outlived ``lease_ttl`` lost its slot to another holder: giving it
    back then is no error, and takes nothing from the holder now in it."""
    state, _ = window.lease(None, 0.0, "slow", 1, 1.0)
    state, taken = window.lease(state, 5.0, "next", 1, 600.0)
    assert taken
    state = window.release(state, "slow")
    _, third = window.lease(state, 5.0, "third", 1, 600.0)
    assert not third


def test_window_a_wait_of_exactly_max_wait_is_allowed() -> None:
    """``max_wait`` is the longest a turn may wait: 60 a minute, the second turn waits
    1 s, which ``max_wait=1`` allows."""
    state, _ = window.reserve(None, NOW, {REQUESTS: 1}, 1.0)
    _, second = window.reserve(state, NOW, {REQUESTS: 1}, 1.0)
    assert second == window.Reservation(1.0, "requests_per_minute")


def test_window_a_turn_held_by_a_pause_does_not_move_the_output_drain() -> None:
    """A turn held 10 s by the server's pause takes no output tokens when it asks: a
    turn in flight charged 120 output tokens a second later (60 a minute) holds the next
    turn the 60 s they take to drain past a minute's worth, not 10 s more."""
    output = window.Bucket("output_tokens_per_minute", 60, 60)
    state = window.pause(None, NOW + 10.0, REQUESTS)
    state, held = window.reserve(state, NOW, {REQUESTS: 1, output: 0}, None)
    assert held.wait == pytest.approx(10.0)
    state = window.charge(state, NOW + 1.0, {output: 120})
    _, after = window.reserve(state, NOW + 1.0, {output: 0}, None)
    assert after.wait == pytest.approx(60.0)


def test_window_a_turn_that_costs_a_limit_nothing_leaves_its_pacing() -> None:
    """1,000 tokens remain until a reset in 10 s (0.01 s a token): a turn of 100 tokens
    holds the next turn of tokens 1 s, whatever turns that cost no tokens go between."""
    state = window.pace(None, NOW, "tokens", 1000, 10.0)
    state, _ = window.reserve(state, NOW, {}, None, server={"tokens": 100})
    for _ in range(3):
        state, free = window.reserve(state, NOW, {}, None, server=REQUEST)
        assert free.wait == 0
    _, tokens = window.reserve(state, NOW, {}, None, server={"tokens": 100})
    assert tokens.wait == pytest.approx(1.0)


def test_window_owed_turn_at_the_reset_does_not_hold_a_smaller_one() -> None:
    """0 tokens left of 10,000, whole again in 60 s: a turn of 20,000 (its tokens come
    back only at the reset) goes at the reset; a turn of 500 after it still goes when
    its own 500 are back, at 3 s."""
    state = window.pace(None, NOW, "tokens", 0, 60.0, 10_000)
    state, big = window.reserve(state, NOW, {}, None, server={"tokens": 20_000})
    assert big.wait == pytest.approx(60.0)
    _, small = window.reserve(state, NOW, {}, None, server={"tokens": 500})
    assert small.wait == pytest.approx(3.0)
