"""The Chinese book and slides render Chinese glyphs, not empty boxes ("tofu").

A browser without a CJK font draws every Chinese character as the same .notdef box, and nothing
else in the browser tests notices: the page loads, the text is in the DOM. So the test draws on
a canvas, in the headless Chromium of the browser tests (`browser` fixture, tests/conftest.py),
the characters 中, 文 and 张量 in the stack the book uses (`sans-serif`), and compares the pixels:
- two different Chinese characters must give different pictures (tofu boxes are all alike);
- a Chinese character must differ from a code point no font has (U+10FFFD, private use), which
  is tofu by construction: the reference rendering of a missing glyph.
It also asks Chromium (DevTools `CSS.getPlatformFontsForNode`) which font drew a Chinese
paragraph, and expects a CJK one. The fonts come from Debian's `fonts-noto-cjk`
(`make system-deps`).
"""

from __future__ import annotations

import pytest

PAGE = """<!doctype html><meta charset="utf-8">
<p id="zh" style="font: 32px sans-serif" lang="zh-CN">中文版：张量与自动求导</p>
<canvas id="c" width="64" height="64"></canvas>"""

DRAW = """(ch) => {
  const c = document.getElementById('c'), g = c.getContext('2d');
  g.fillStyle = 'white'; g.fillRect(0, 0, 64, 64);
  g.fillStyle = 'black'; g.font = '48px sans-serif'; g.textBaseline = 'top';
  g.fillText(ch, 4, 4);
  const d = g.getImageData(0, 0, 64, 64).data;
  let ink = 0, sig = [];
  for (let i = 0; i < d.length; i += 4) { const v = d[i] < 128 ? 1 : 0; ink += v; sig.push(v); }
  return {ink: ink, sig: sig.join('')};
}"""

CJK_FAMILIES = (
    "CJK",
    "Han",
    "Hei",
    "Song",
    "Ming",
    "WenQuanYi",
    "Source Han",
    "Droid Sans Fallback",
)


@pytest.fixture
def page(browser):
    context = browser.new_context()
    page = context.new_page()
    page.set_content(PAGE)
    yield page
    context.close()


def test_chinese_characters_are_drawn_as_glyphs_not_tofu(page) -> None:
    drawn = {ch: page.evaluate(DRAW, ch) for ch in ("中", "文", "张", "\U0010fffd")}
    tofu = drawn["\U0010fffd"]["sig"]
    for ch in ("中", "文", "张"):
        assert drawn[ch]["ink"] > 0, f"{ch!r} drew nothing at all"
        is_tofu = drawn[ch]["sig"] == tofu
        assert not is_tofu, (
            f"{ch!r} is drawn as the missing-glyph box (tofu): no CJK font is installed "
            "(Debian: fonts-noto-cjk, `make system-deps`)"
        )
    same = drawn["中"]["sig"] == drawn["文"]["sig"]
    assert not same, "中 and 文 render to the same picture: both are tofu boxes"


def test_a_chinese_paragraph_uses_a_cjk_font(page) -> None:
    session = page.context.new_cdp_session(page)
    session.send("DOM.enable")
    session.send("CSS.enable")
    root = session.send("DOM.getDocument")["root"]["nodeId"]
    node = session.send("DOM.querySelector", {"nodeId": root, "selector": "#zh"})["nodeId"]
    fonts = session.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    names = [f["familyName"] for f in fonts]
    han = sum(f["glyphCount"] for f in fonts if any(k in f["familyName"] for k in CJK_FAMILIES))
    assert han >= 10, (
        f"the Chinese paragraph (11 Han characters) was drawn with {fonts}: expected a CJK font "
        f"to draw its Han characters, found families {names}"
    )
