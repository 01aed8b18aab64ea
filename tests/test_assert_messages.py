"""An assert's message says both sides, so a failure on another torch says what changed.

`pytest --nbval-lax` on a newer torch reports a failing cell by its message. A message that is
empty, that is only an interpolation (`f"{x}"`), or that says what was found without what was
expected (`f"jit.script: found\\n{code}"`) leaves the reader to guess what changed. Statically:
the string parts of the message (an f-string's literal text, a string constant, the strings of
a concatenation) must hold a word, and a message that says `found` (or `got`) must also say
what was expected (`expected`, `should`, `must`, `instead`). A message computed elsewhere (a
name, a call) cannot be read statically and is left alone.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from test_notebooks import GOOD, NOTEBOOKS, Cells, _cells, _code, _md, _py, _tree

FOUND = re.compile(r"\b(found|got)\b", re.I)
EXPECTED = re.compile(r"\bexpect|\bshould\b|\bmust\b|\binstead\b", re.I)


def _literal_text(msg: ast.expr) -> str | None:
    """The string parts of a message, or None when it holds none we can read (a name, a call)."""
    parts = [
        n.value for n in ast.walk(msg) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]
    if not parts and not isinstance(msg, ast.JoinedStr):
        return None
    return "".join(parts)


def one_sided_messages(cells: Cells) -> list[str]:
    """An assert's message says what was expected and what was found: not empty, not only an
    interpolation, and not `found ...` without what was expected."""
    problems = []
    for i, src in _code(cells):
        tree = _tree(src)
        for node in ast.walk(tree) if tree else ():
            if not (isinstance(node, ast.Assert) and node.msg is not None):
                continue
            text = _literal_text(node.msg)
            if text is None:
                continue
            shown = ast.unparse(node.msg)[:80]
            if not re.search(r"[^\W\d_]{2,}", text):
                problems.append(f"cell {i}: the message {shown} holds no words")
            elif FOUND.search(text) and not EXPECTED.search(text):
                problems.append(
                    f"cell {i}: the message {shown} says what it found, not what it expected"
                )
    return problems


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_rule(nb: Path) -> None:
    problems = one_sided_messages(_cells(nb))
    assert not problems, f"{nb.name}: {one_sided_messages.__doc__.split(':')[0]}\n" + "\n".join(
        problems
    )


KEPT = GOOD + [
    _md("## 2. Messages that say both sides"),
    _py('assert ops == want, f"graph ops: expected {want}, found {ops}"'),
    _py('assert x == 3, f"x should be 3, got {x}"'),
    _py('assert out, "no result"'),
    _py('assert ok, ("launch: expected " + str(want) + ", found " + str(got))'),
    _py("assert ok, message_built_elsewhere"),
]

BROKEN = {
    "empty": _py('assert x, ""'),
    "blank": _py('assert x, "  "'),
    "interpolation only": _py('assert x == y, f"{y}"'),
    "interpolations and punctuation": _py('assert x == y, f"{x}: {y}!"'),
    "found, no expected": _py('assert "Deprecation" in code, f"jit.script: found\\n{code}"'),
    "got, no expected": _py('assert x == 1, f"x: got {x}"'),
    "concatenation, found only": _py('assert ok, "found " + str(got)'),
}


def test_rule_passes_messages_that_say_both_sides() -> None:
    assert one_sided_messages(KEPT) == []


@pytest.mark.parametrize("case", list(BROKEN))
def test_rule_catches_a_one_sided_message(case: str) -> None:
    problems = one_sided_messages(KEPT + [BROKEN[case]])
    assert len(problems) == 1, f"{case}: expected one problem, found {problems}"
    assert problems[0].startswith(f"cell {len(KEPT)}: the message "), problems
