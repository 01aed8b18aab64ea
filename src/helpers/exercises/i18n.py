"""The exercises' messages in the notebook's language: English, or Chinese from a gettext catalog.

Used by: helpers.exercises (`check`, the shared hints) and the judges (`helpers.exercises.nbNN`);
tests/test_zh.py; `tools/zh.py exercises` (extraction).

A judge writes every message it shows as `tr("English text with {name}", name=value)`: the
English text is the gettext msgid, looked up in `locale/zh/exercises.po` (read with polib at run
time, so a fresh clone needs no compile step), and the values are filled in afterwards with
`str.format`, in whichever language was chosen. A message without a translation (a judge whose
owner has not converted it yet, an entry not yet translated) is shown in English: a missing
translation never breaks a check.

Which language: a Chinese notebook is `notebooks/zh/NN_*.ipynb`, a twin whose code cells are
byte-identical to the English ones, so the language cannot come from a cell. It comes from the
notebook's path, which the kernel sees in two places:
1. `JPY_SESSION_NAME`, the notebook path Jupyter Server (JupyterLab, Notebook 7) gives the kernel;
2. otherwise the kernel's working directory: Jupyter Server, nbclient (`make execute`), nbval
   and VS Code start a notebook's kernel in the notebook's own folder, `notebooks/zh`.
`PSR_LANG=zh` (or `en`) overrides both, and `language(...)` sets it for a block (tests).
Anything else (pytest at the repository root, a script) is English.
"""

from __future__ import annotations

import contextlib
import functools
import os
import string
from collections.abc import Iterator
from pathlib import Path

__all__ = ["tr", "N_", "Message", "current_language", "language", "CATALOG"]

ROOT = Path(__file__).resolve().parents[3]
#: The catalog of the exercises' messages (msgid English, msgstr Chinese).
CATALOG = ROOT / "locale" / "zh" / "exercises.po"

_override: list[str] = []


def _is_zh_folder(folder: Path) -> bool:
    return folder.name == "zh" and folder.parent.name == "notebooks"


def current_language() -> str:
    """ "zh" when the running notebook is a Chinese twin (see the module docstring), else "en"."""
    if _override:
        return _override[-1]
    forced = os.environ.get("PSR_LANG", "").strip().lower()
    if forced in ("zh", "en"):
        return forced
    session = os.environ.get("JPY_SESSION_NAME", "")
    if session.endswith(".ipynb"):
        return "zh" if _is_zh_folder(Path(session).parent) else "en"
    try:
        return "zh" if _is_zh_folder(Path.cwd()) else "en"
    except OSError:  # the working directory was removed
        return "en"


@contextlib.contextmanager
def language(lang: str) -> Iterator[None]:
    """Show messages in `lang` ("zh" or "en") inside the block, whatever the path says."""
    if lang not in ("zh", "en"):
        raise ValueError(f"language {lang!r}: expected 'zh' or 'en'")
    _override.append(lang)
    try:
        yield
    finally:
        _override.pop()


@functools.cache
def _translations(path: Path = CATALOG) -> dict[str, str]:
    """msgid -> msgstr of the current, non-empty entries of the catalog ({} when it is absent)."""
    if not path.exists():
        return {}
    import polib

    return {
        e.msgid: e.msgstr
        for e in polib.pofile(str(path), wrapwidth=0)
        if e.msgstr and not e.fuzzy and not e.obsolete
    }


def fields(template: str) -> set[str]:
    """The replacement fields of a message template ("{found!r}" -> "found")."""
    return {
        name.split(".")[0].split("[")[0]
        for _, name, _, _ in string.Formatter().parse(template)
        if name is not None
    }


def N_(msgid: str, /) -> str:
    """Mark `msgid` for the catalog where it is defined and translate it later with `tr(name)`."""
    return msgid


class Message(str):
    """What `tr` returns: the text, and `msgids`, the English msgids it was made from (its own and
    those of the `tr` values filled into its fields, never a plain string's), so that a grader
    decides from the judge's msgids, not from a text that may carry the reader's own words
    (`helpers.exercises.score`). `+` keeps the msgids (a plain string added brings none); any
    other operation on it (`join`, an f-string, `str()`) gives a plain str."""

    msgids: frozenset[str]

    def __new__(cls, text: str, msgids: frozenset[str]) -> Message:
        made = super().__new__(cls, text)
        made.msgids = msgids
        return made

    def __add__(self, other: str) -> Message:
        return Message(str(self) + other, self.msgids | _msgids(other))

    def __radd__(self, other: str) -> Message:
        return Message(other + str(self), self.msgids | _msgids(other))


def _msgids(value: object) -> frozenset[str]:
    return value.msgids if type(value) is Message else frozenset()


def tr(msgid: str, /, **values: object) -> Message:
    """`msgid` in the current language, with `values` filled in (`str.format` fields)."""
    text = msgid
    if current_language() == "zh":
        text = _translations().get(msgid, msgid)
    msgids = frozenset({msgid}).union(*(_msgids(v) for v in values.values()))
    return Message(text.format(**values), msgids)
