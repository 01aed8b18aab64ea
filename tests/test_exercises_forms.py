"""Equivalent forms of right answers pass, and the hints for near misses say what is off.

tests/test_exercises.py feeds every judge its worked solution (solutions/nbNN.py `SOLUTIONS`)
and its typical wrong answers (`WRONG`). A student may write the same right answer in another
form: a list for a tuple, 7.0 for 7, a set for a list, "aten.gelu" for "aten::gelu", a worker
that returns a tensor rather than a list. These cases are built from `SOLUTIONS`, so they follow
the worked answers when those change.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from helpers.exercises import as_int, judge


def _solution(key: str):
    return importlib.import_module(f"solutions.nb{key[:2]}").SOLUTIONS[key]


def _forms():
    """(key, an equivalent form of the worked answer) for each form a judge accepts."""
    s = _solution
    yield "00.2", sorted(s("00.2"))  # a list
    yield "00.2", {op.replace("aten::", "aten.") for op in s("00.2")}  # torch.ops spelling
    yield "00.2", {op.replace("aten::", "") for op in s("00.2")}
    for key in ("00.4", "05.1", "08.3", "14.3", "17.3", "17.4"):
        yield key, float(s(key))
        yield key, np.int64(s(key))
    yield "01.1", list(s("01.1"))
    yield "03.4", set(s("03.4"))
    yield "05.5", list(s("05.5"))
    yield "05.5", [float(v) for v in s("05.5")]
    yield "09.2", [float(a) for a in s("09.2")]
    yield "09.2", tuple(np.int64(a) for a in s("09.2"))
    yield "10.2", {op.replace("aten::", "aten."): v for op, v in s("10.2").items()}
    yield "13.4", tuple(np.int64(v) for v in s("13.4"))
    yield "16.3", np.array(s("16.3"))
    yield "18.2", [s("18.2")[0], s("18.2")[1]]  # a list pair


_FORMS = list(_forms())


# Ids by position and type, not by repr: a form built from a set lists its items in the string
# hash seed's order, and xdist workers must collect the same ids.
@pytest.mark.parametrize(
    ("key", "form"), _FORMS, ids=[f"{k}-{i}-{type(f).__name__}" for i, (k, f) in enumerate(_FORMS)]
)
def test_equivalent_form_is_accepted(key, form):
    ok, message = judge(key, form)
    assert ok, f"{key}: {form!r} is the worked answer in another form, judged 'not yet: {message}'"


def _near_misses():
    """(key, a wrong answer, words its hint must contain)."""
    truth = _solution("13.1")
    yield "13.1", {k: v / 1e9 for k, v in truth.items()}, "answer in bytes, not GB"
    yield "13.1", {k: round(v / 2**30, 1) for k, v in truth.items()}, "answer in bytes, not GB"
    yield "14.3", True, "whole number"  # a bool is not a count


@pytest.mark.parametrize(("key", "answer", "words"), list(_near_misses()), ids=str)
def test_near_miss_gets_its_hint(key, answer, words):
    ok, message = judge(key, answer)
    assert not ok, f"{key}: {answer!r} is wrong but was judged correct: {message}"
    assert words in message, f"{key}: the hint for {answer!r} lacks {words!r}: {message}"


def test_as_int():
    found = [as_int(v) for v in (7, 7.0, np.int64(7), np.float32(7.0), True, 7.5, "7", None)]
    assert found == [7, 7, 7, 7, None, None, None, None], f"as_int gave {found}"


def tensor_all_reduce(rank, world_size, t, root):
    """04.4 written to return the tensor itself rather than a list."""
    dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)  # noqa: F821 (launch_source's prelude)
    dist.broadcast(t, src=root)  # noqa: F821
    return t


def test_04_4_worker_returning_a_tensor():
    """The judge runs it on 2 ranks with launch_source, which reads its source from this file."""
    ok, message = judge("04.4", tensor_all_reduce)
    assert ok, f"04.4: a worker returning the reduced tensor was judged 'not yet: {message}'"
