"""The Chinese edition: gettext catalogs keyed by cell id + source hash -> notebooks/zh/*.ipynb.

    python tools/zh.py update     # sync locale/zh/*.po with the English notebooks
    python tools/zh.py build      # write notebooks/zh/*.ipynb from the English notebooks + catalogs
    python tools/zh.py status     # what is left to translate (exit 1 if anything)
    python tools/zh.py exercises  # sync locale/zh/exercises.po with the judges' messages
    python tools/zh.py compatibility  # docs/zh/compatibility.md from docs/compatibility.json
    (`make zh` runs update, then build, then status; `all` also runs `exercises`)

One catalog per notebook, `locale/zh/NN_name.po`. Each markdown cell of the English notebook is one
entry: `msgctxt` is `"<cell id>:<first 12 hex digits of sha256(source)>"`, `msgid` the English
source, `msgstr` the Chinese. Code cells are never translated: the Chinese notebook is the English
one with each markdown cell's text replaced, so code, outputs and cell ids are identical and the
strict nbval run of the English notebooks covers both.

When English prose changes, `update` gives the changed cell a new entry (new hash) marked
`fuzzy`, with the old translation as its starting point and the old English kept as `#| msgid`,
so a translator sees exactly what changed; the tests fail until the entry is translated and the
flag removed. Entries whose cell is gone are dropped (gettext would keep them as `#~` obsolete).

The exercises' messages (what a check cell prints) have a catalog of their own,
`locale/zh/exercises.po`: `exercises` collects every `tr("...")` and `N_("...")` of the judge
modules (`src/helpers/exercises/*.py`, as xgettext would), keeps the translations of messages
that did not change, and gives a changed message its old translation marked `fuzzy`. It is read
at run time by `helpers.exercises.i18n` (no compiled .mo file). `TRANSLATED_JUDGES` lists the
modules whose every message must be translated; the others fall back to English.
"""

from __future__ import annotations

import ast
import copy
import difflib
import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import polib

ROOT = Path(__file__).resolve().parents[1]
EN = ROOT / "notebooks"
ZH = EN / "zh"
LOCALE = ROOT / "locale" / "zh"
LANG = "zh_CN"
JUDGES = ROOT / "src" / "helpers" / "exercises"
EXERCISE_CATALOG = LOCALE / "exercises.po"
#: Judge modules whose messages are all translated (tests/test_zh.py holds them to it): every one.
#: A new notebook's judge module joins when its messages are translated (`tools/zh.py exercises`).
TRANSLATED_JUDGES = (
    "__init__", "nb00", "nb01", "nb02", "nb03", "nb04", "nb05", "nb06", "nb07", "nb08", "nb09",
    "nb10", "nb11", "nb12", "nb13", "nb14", "nb15", "nb16", "nb17", "nb18", "nb19",
)  # fmt: skip


def notebooks() -> list[Path]:
    return sorted(EN.glob("[0-9][0-9]_*.ipynb"))


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:12]


def context(cell) -> str:
    return f"{cell.id}:{source_hash(cell.source)}"


def catalog_path(notebook: Path) -> Path:
    return LOCALE / (notebook.stem + ".po")


def load_catalog(notebook: Path) -> polib.POFile:
    path = catalog_path(notebook)
    if path.exists():
        return polib.pofile(str(path), wrapwidth=0)
    po = polib.POFile(wrapwidth=0)
    po.metadata = {
        "Project-Id-Version": "pytorch-source-reading",
        "Language": LANG,
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
    }
    return po


def markdown_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "markdown"]


def update(notebook: Path) -> polib.POFile:
    """Bring one catalog in line with its notebook; returns it (written to disk)."""
    nb = nbformat.read(notebook, 4)
    old = load_catalog(notebook)
    by_ctx = {e.msgctxt: e for e in old}
    by_id: dict[str, polib.POEntry] = {}
    for e in old:
        by_id.setdefault(e.msgctxt.split(":")[0], e)
    po = polib.POFile(wrapwidth=0)
    po.metadata = old.metadata
    for cell in markdown_cells(nb):
        ctx = context(cell)
        if ctx in by_ctx:
            entry = by_ctx[ctx]
        else:
            entry = polib.POEntry(msgctxt=ctx, msgid=cell.source, msgstr="")
            prev = by_id.get(cell.id)
            if prev is not None and prev.msgstr:
                entry.msgstr = prev.msgstr
                entry.flags.append("fuzzy")
                entry.previous_msgid = prev.previous_msgid or prev.msgid
        entry.occurrences = [(f"{notebook.parent.name}/{notebook.name}", cell.id)]
        po.append(entry)
    path = catalog_path(notebook)
    path.parent.mkdir(parents=True, exist_ok=True)
    po.save(str(path))
    return po


_CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
# Chinese punctuation a wrapped line may end or start with: the CJK and full-width blocks, and the
# dash —— and ellipsis …… (U+2014, U+2026), which Chinese text writes doubled
_CJK_PUNCT_CHAR = re.compile(r"[\u3000-\u303f\uff00-\uffef\u2014\u2026]")
_BLOCK = re.compile(r"\s*([-*+] |\d+\. |\||#|>|```|\$\$)")


def join_cjk_lines(text: str) -> str:
    """Join wrapped lines of a paragraph where a break would render as a wrong space.

    Markdown turns a line break inside a paragraph into a space, which Chinese text must not
    have between two Chinese characters, after Chinese punctuation (`。\n`code``) or before it
    (`code`\n（…）); the catalogs keep the wrapped lines (readable diffs), the notebooks get
    joined ones. Between Chinese and Latin text the space is the style sheet's, so that break
    stays. Lines that start a list item, table row, heading, quote or code block, and every line
    inside a fenced code block, are left alone.
    """
    lines = text.split("\n")
    out = [lines[0]]
    fenced = lines[0].lstrip().startswith("```")
    for line in lines[1:]:
        prev = out[-1]
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append(line)
            continue
        first = line.lstrip()[:1]
        if (
            not fenced
            and prev.strip()
            and first
            and (
                (_CJK.match(prev[-1]) and _CJK.match(first))
                or _CJK_PUNCT_CHAR.match(prev[-1])
                or _CJK_PUNCT_CHAR.match(first)
            )
            and not _BLOCK.match(line)
            and not re.match(r"\s*(#|\|)", prev)  # a heading or table row stays one line
        ):
            out[-1] = prev + line.lstrip()
        else:
            out.append(line)
    return "\n".join(out)


def translated(notebook: Path, po: polib.POFile | None = None):
    """The Chinese notebook: the English one with every translated markdown cell replaced."""
    nb = nbformat.read(notebook, 4)
    po = po if po is not None else load_catalog(notebook)
    entries = {e.msgctxt.split(":")[0]: e for e in po}
    zh = copy.deepcopy(nb)
    for cell in markdown_cells(zh):
        entry = entries.get(cell.id)
        if entry is not None and entry.msgstr:
            cell.source = join_cjk_lines(entry.msgstr)
    if f"nb{notebook.name[:2]}" in TRANSLATED_JUDGES:
        for cell in zh.cells:
            if cell.cell_type == "code":
                cell.outputs = check_outputs_in_chinese(cell.outputs)
    zh.metadata["language_info"] = dict(nb.metadata.get("language_info", {}))
    zh.metadata["translation"] = {"language": "zh-CN", "source": f"../{notebook.name}"}
    return zh


#: A check's verdict as `check` prints it: a mark, the key, the label, the message wrapped onto
#: lines that start with two spaces (helpers.exercises.verdict).
_CHECK_LINE = re.compile(r"^([✓✗]) (\d\d\.\d+) (correct|not yet): (.*(?:\n  .*)*)", re.M)


def check_outputs_in_chinese(outputs: list) -> list:
    """A code cell's stored outputs with each check verdict ("✗ 05.1 not yet: ...") as a Chinese
    kernel prints it, where the message is a catalog entry without fields (the untouched
    starter's message, the one stored output a check cell has); everything else as it is.

    The twin's code cells are byte-identical, so a Chinese reader who runs a check cell gets
    Chinese (helpers.exercises.i18n); this makes the stored output, which the book shows, agree.
    """
    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))
    from helpers.exercises import verdict
    from helpers.exercises.i18n import language

    catalog = polib.pofile(str(EXERCISE_CATALOG), wrapwidth=0) if EXERCISE_CATALOG.exists() else []
    chinese = {e.msgid for e in catalog if e.msgstr and not e.fuzzy}

    def line(m: re.Match) -> str:
        mark, key, label, wrapped = m.groups()
        message = " ".join(part.strip() for part in wrapped.split("\n"))
        if message not in chinese or "{" in message:
            return m.group()
        with language("zh"):
            from helpers.exercises.i18n import tr

            return verdict(key, label == "correct", tr(message))

    out = copy.deepcopy(outputs)
    for o in out:
        if o.get("output_type") == "stream" and o.get("name") == "stdout":
            o["text"] = _CHECK_LINE.sub(line, o["text"])
    return out


def build(notebook: Path) -> Path:
    out = ZH / notebook.name
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(translated(notebook), out)
    return out


def apply(notebook: str, translations: dict[str, str]) -> int:
    """Set the Chinese text of cells (by English cell id) in one catalog; clears `fuzzy`.

    `notebook` is a file name or prefix ("05"). Translators call this from a scratch script:
    `apply("05", {"<cell id>": '''...中文...'''})`. Returns how many entries it set.
    """
    (path,) = [nb for nb in notebooks() if nb.name.startswith(notebook)]
    po = update(path)
    entries = {e.msgctxt.split(":")[0]: e for e in po}
    unknown = sorted(set(translations) - set(entries))
    if unknown:
        raise KeyError(f"{path.name}: no markdown cell with id {unknown}")
    for cell_id, text in translations.items():
        entry = entries[cell_id]
        entry.msgstr = text
        if entry.fuzzy:
            entry.flags.remove("fuzzy")
        entry.previous_msgid = None
    po.save(str(catalog_path(path)))
    return len(translations)


def exercise_messages(module: Path) -> list[tuple[str, int]]:
    """(msgid, line) of every `tr("...")` and `N_("...")` call in one judge module."""
    tree = ast.parse(module.read_text())
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("tr", "N_")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.args[0].value, node.lineno))
    return sorted(found, key=lambda m: m[1])


def judge_modules() -> list[Path]:
    return sorted(JUDGES.glob("*.py"))


def update_exercises() -> polib.POFile:
    """Bring locale/zh/exercises.po in line with the judges' messages; returns it (written)."""
    old = (
        polib.pofile(str(EXERCISE_CATALOG), wrapwidth=0)
        if EXERCISE_CATALOG.exists()
        else polib.POFile(wrapwidth=0)
    )
    by_id = {e.msgid: e for e in old}
    po = polib.POFile(wrapwidth=0)
    po.metadata = old.metadata or {
        "Project-Id-Version": "pytorch-source-reading exercises",
        "Language": LANG,
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
    }
    entries: dict[str, polib.POEntry] = {}
    for module in judge_modules():
        where = f"src/helpers/exercises/{module.name}"
        for msgid, line in exercise_messages(module):
            if msgid in entries:
                entries[msgid].occurrences.append((where, str(line)))
                continue
            entry = by_id.get(msgid) or polib.POEntry(msgid=msgid, msgstr="")
            entry.occurrences = [(where, str(line))]
            entries[msgid] = entry
            po.append(entry)
    unused = {e.msgid: e for e in old if e.msgid not in entries and e.msgstr}
    for entry in po:
        if not entry.msgstr and unused:
            close = difflib.get_close_matches(entry.msgid, list(unused), n=1, cutoff=0.75)
            if close:
                prev = unused.pop(close[0])
                entry.msgstr = prev.msgstr
                entry.flags.append("fuzzy")
                entry.previous_msgid = prev.previous_msgid or prev.msgid
    EXERCISE_CATALOG.parent.mkdir(parents=True, exist_ok=True)
    po.save(str(EXERCISE_CATALOG))
    return po


@dataclass
class Problem:
    notebook: str
    cell: str
    what: str

    def __str__(self) -> str:
        return f"{self.notebook} cell {self.cell}: {self.what}"


def problems(notebook: Path) -> list[Problem]:
    """Everything that keeps the Chinese notebook from matching the English one."""
    nb = nbformat.read(notebook, 4)
    po = load_catalog(notebook)
    found: list[Problem] = []
    ctxs = {e.msgctxt: e for e in po}
    ids = {c.id for c in markdown_cells(nb)}
    for cell in markdown_cells(nb):
        first = cell.source.strip().splitlines()[0][:60] if cell.source.strip() else ""
        entry = ctxs.get(context(cell))
        if entry is None:
            stale = any(e.msgctxt.split(":")[0] == cell.id for e in po)
            what = "English changed since it was translated" if stale else "not translated"
            found.append(Problem(notebook.name, cell.id, f"{what} ({first!r}); run `make zh`"))
        elif not entry.msgstr:
            found.append(Problem(notebook.name, cell.id, f"empty translation ({first!r})"))
        elif entry.fuzzy:
            found.append(Problem(notebook.name, cell.id, f"fuzzy: English changed ({first!r})"))
    for e in po:
        if e.msgctxt.split(":")[0] not in ids:
            found.append(Problem(notebook.name, e.msgctxt, "translation has no cell"))
    return found


def exercise_problems() -> list[Problem]:
    """Messages of the TRANSLATED_JUDGES without a current translation."""
    po = polib.pofile(str(EXERCISE_CATALOG), wrapwidth=0) if EXERCISE_CATALOG.exists() else []
    entries = {e.msgid: e for e in po}
    found = []
    for name in TRANSLATED_JUDGES:
        module = JUDGES / f"{name}.py"
        for msgid, line in exercise_messages(module):
            entry = entries.get(msgid)
            what = (
                "not in the catalog; run `tools/zh.py exercises`"
                if entry is None
                else "not translated"
                if not entry.msgstr
                else "fuzzy: English changed"
                if entry.fuzzy
                else None
            )
            if what:
                found.append(Problem(EXERCISE_CATALOG.name, f"{module.name}:{line}", what))
    return found


# --- the step viewers in the Chinese book (locale/zh/viewers.po) ----------------------------------
# A viewer's words are data (each step's text and picture, computed in Python and stored in the
# notebook's widget state), identical in both twins: the Chinese book translates them when it is
# built (tools/book.py, zh edition), line by line and text node by text node, from a catalog of
# templates. The stored notebooks, and so nbval, stay as they are.

VIEWER_CATALOG = LOCALE / "viewers.po"
_FIELD = re.compile(r"\{(\w+)\}")
_SVG_TEXT = re.compile(r">([^<>]+)<")


class ViewerCatalog:
    """The templates of locale/zh/viewers.po: `line(english)` is the Chinese of one line (None
    when no entry matches), `text`, `svg` and `state` apply it to a step's text, a picture's
    text nodes and a whole widget state."""

    def __init__(self, path: Path = VIEWER_CATALOG) -> None:
        entries = [e for e in polib.pofile(str(path), wrapwidth=0) if e.msgstr and not e.fuzzy]
        self.exact = {e.msgid: e.msgstr for e in entries if not _FIELD.search(e.msgid)}
        templates = [e for e in entries if _FIELD.search(e.msgid)]
        # the most literal text first: "rank {r}: idle" before "rank {r}: {action} ..."
        templates.sort(key=lambda e: -len(_FIELD.sub("", e.msgid)))
        self.templates = [(self._regex(e.msgid), e.msgstr) for e in templates]

    @staticmethod
    def _regex(msgid: str) -> re.Pattern:
        parts = _FIELD.split(msgid)
        return re.compile(
            "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)" for i, p in enumerate(parts))
        )

    def line(self, english: str) -> str | None:
        if english in self.exact:
            return self.exact[english]
        for regex, chinese in self.templates:
            m = regex.fullmatch(english)
            if m:
                # a field that is itself an entry (a stage's name, "none", what a pipeline
                # action does) is translated too
                fields = {k: self.line(v) or v for k, v in m.groupdict().items()}
                return chinese.format(**fields)
        return None

    def text(self, english: str) -> str:
        return "\n".join(self.line(x) or x for x in english.split("\n"))

    def svg(self, english: str) -> str:
        import html

        def node(m: re.Match) -> str:
            text = html.unescape(m.group(1))
            chinese = self.line(text) if text.strip() else None
            return m.group() if chinese is None else f">{html.escape(chinese, quote=False)}<"

        return _SVG_TEXT.sub(node, english)

    def state(self, state: dict) -> dict:
        """A copy of an embedded widget state (model id -> {"state": ...}) with every viewer's
        label, step texts (`text`, 01's `head`) and pictures (`svg`, 16's `picture`) in Chinese;
        code (01's `body`), names, links and every attribute stay as they are."""
        out = copy.deepcopy(state)
        for model in out.values():
            s = model.get("state", {})
            if "steps" not in s:
                continue
            if isinstance(s.get("label"), str):
                s["label"] = self.line(s["label"]) or s["label"]
            for step in s["steps"]:
                for key in ("text", "head"):
                    if isinstance(step.get(key), str):
                        step[key] = self.text(step[key])
                if isinstance(step.get("svg"), str):
                    step["svg"] = self.svg(step["svg"])
            if isinstance(s.get("picture"), str):
                s["picture"] = self.svg(s["picture"])
        return out


#: English words a translated viewer line may keep (glossary: rank, token, query, key, stage and
#: the collectives' names stay English; proper names; the symbols of the ring attention text).
VIEWER_KEPT = {
    "rank", "ranks", "token", "tokens", "query", "key", "stage", "Dynamo", "AOTAutograd",
    "Inductor", "ReduceScatter", "AllGather", "LSE", "out", "int64",
}  # fmt: skip


def english_prose(line: str) -> list[str]:
    """The English words of a line that a reader would read as prose: words of three letters or
    more outside identifiers, paths and links (a token holding `._/:<>=#`) and VIEWER_KEPT."""
    words = []
    for token in line.split():
        if re.search(r"[._/<>=#]|::", token.strip("(),;:")):
            continue
        words += [w for w in re.findall(r"[A-Za-z]{3,}\d*", token) if w not in VIEWER_KEPT]
    return words


def viewer_texts(state: dict) -> list[str]:
    """Every line a reader sees in the viewers of a widget state (labels, step texts, the
    pictures' text nodes): what the Chinese book must show in Chinese."""
    import html

    seen: list[str] = []
    for model in state.values():
        s = model.get("state", {})
        if "steps" not in s:
            continue
        seen.append(s.get("label", ""))
        pictures = [s.get("picture", "")]
        for step in s["steps"]:
            for key in ("text", "head"):
                seen += str(step.get(key, "")).split("\n")
            pictures.append(step.get("svg", ""))
        for svg in pictures:
            seen += [html.unescape(m) for m in _SVG_TEXT.findall(svg or "")]
    return [x for x in seen if x.strip()]


# --- the compatibility report's Chinese page (docs/zh/compatibility.md) --------------------------
# Generated, like docs/compatibility.md, from the record docs/compatibility.json that
# `tools/matrix.py report` writes: `python tools/zh.py compatibility` (matrix.py's publish calls
# `write_compatibility` after writing the English page). The book stages it into the zh edition.

COMPATIBILITY_RECORD = ROOT / "docs" / "compatibility.json"
COMPATIBILITY_PAGE = ROOT / "docs" / "zh" / "compatibility.md"


def compatibility_page(record: dict) -> str:
    """docs/zh/compatibility.md from the record (the same tables as tools/matrix.py's
    `markdown_page`, in Chinese; failure messages stay as torch printed them)."""
    if str(ROOT) not in sys.path:  # run as `python tools/zh.py compatibility`
        sys.path.insert(0, str(ROOT))
    from tools import matrix

    versions = record["versions"]
    names = sorted({n for v in versions.values() for n in v["notebooks"]})
    units = "、".join(f"`{t}`" for t in matrix.UNIT_TESTS)
    out = [
        "# 兼容性：notebook 在哪些 torch 版本上测试过",
        "",
        "由 `python3 tools/zh.py compatibility` 根据最近一次 `make test-matrix` 的记录"
        f"（`docs/compatibility.json`，{record['date'] or '没有运行记录'}）生成，请不要手工编辑。"
        "英文版见 `docs/compatibility.md`，由 `python3 tools/matrix.py report` 生成。",
        "",
        "固定版本 torch 2.13.0（`requirements.txt`）由 `make test` 检查：比对每一个存储的输出"
        "（严格模式的 nbval）。下面这些更新的版本由 `make test-matrix` 检查：每个版本在自己的环境中"
        "安装 `requirements.txt` 的其余依赖，用 `pytest --nbval-lax` 运行每个 notebook"
        f"（每个单元格都运行，只比对其中的断言），并运行陈述 torch 事实的单元测试（{units}）。",
        "",
        "## 运行记录",
        "",
        "| torch | 安装的版本 | Python | 日期（UTC） | 通过的单元格与测试 | 失败 | 分钟 |",
        "|---|---|---|---|---|---|---|",
    ]
    for version, v in versions.items():
        t = matrix.totals(v)
        minutes = f"{v['seconds'] / 60:.1f}" if v.get("seconds") else ""
        when = v["started"].replace("T", " ")[:16]
        out.append(
            f"| {version} | `{v['installed']}` | {v['python']} | {when} | {t['passed']} | "
            f"{t['failed']} | {minutes} |"
        )
    out += ["", "## 逐个 notebook", "", "`--nbval-lax` 下通过 / 失败的单元格数。", ""]

    out += matrix.results_table(versions, "notebook", "notebooks", names, missing="未运行")
    unit_files = sorted({n for v in versions.values() for n in v["unit"]})
    if unit_files:
        out += ["", "单元测试通过 / 失败的数目：", ""]
        out += matrix.results_table(versions, "文件", "unit", unit_files, missing="未运行")
    out += ["", "## 失败", ""]
    any_failure = False
    for version, v in versions.items():
        for name, g in {**v["notebooks"], **v["unit"]}.items():
            for f in g["failures"]:
                any_failure = True
                where = (
                    f"代码单元格 {f['code_cell']}"
                    + (f"（id {f['cell_id']}）" if f.get("cell_id") else "")
                    if "code_cell" in f
                    else f"`{f['test']}`"
                )
                out += [
                    f"**torch {version}，`{name}`，{where}**：`{f['exception']}`",
                    "",
                    "~~~text",
                    f["message"].replace("~~~", "~ ~ ~") or "（消息为空）",
                    "~~~",
                    "",
                ]
    if not any_failure:
        out += ["没有失败：上面每个版本上的每个单元格和测试都通过了。", ""]
    return "\n".join(out).rstrip() + "\n"


README_ZH = ROOT / "README.zh.md"
TESTED_ON_ZH = "**测试过的版本**"  # how README.zh.md's generated line starts


def readme_line(record: dict) -> str:
    """README.zh.md's one generated line: tools/matrix.py's `readme_line`, in Chinese."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tools import matrix

    parts = []
    for version, v in record["versions"].items():
        t = matrix.totals(v)
        ok = t["notebooks"] - t["notebooks_failing"]
        state = f"{ok}/{t['notebooks']} 个 notebook 通过"
        if t["failed"]:
            state += f"，{t['failed']} 个单元格或测试失败"
        parts.append(f"torch {version}（{state}）")
    runs = "；".join(parts) if parts else "没有矩阵运行记录"
    return (
        f"{TESTED_ON_ZH}（{record['date'] or '从未运行'}，`make test-matrix`，只比对断言）："
        f"{runs}；"
        "固定版本 torch 2.13.0 由 `make test` 检查。逐个 notebook 的结果见 "
        "[docs/zh/compatibility.md](docs/zh/compatibility.md)。"
    )


def write_compatibility(record: dict | None = None) -> Path:
    """Write docs/zh/compatibility.md from `record` (default: docs/compatibility.json), and
    README.zh.md's line that starts with TESTED_ON_ZH."""
    import json

    if record is None:
        record = json.loads(COMPATIBILITY_RECORD.read_text())
    COMPATIBILITY_PAGE.parent.mkdir(parents=True, exist_ok=True)
    COMPATIBILITY_PAGE.write_text(compatibility_page(record))
    lines = README_ZH.read_text().splitlines()
    found = [i for i, line in enumerate(lines) if line.startswith(TESTED_ON_ZH)]
    if found:
        lines[found[0]] = readme_line(record)
        README_ZH.write_text("\n".join(lines) + "\n")
    return COMPATIBILITY_PAGE


# --- the style sheet (tests/test_zh_style.py) ---------------------------------------------------
# The rules of the Chinese technical-writing style guides that PyTorch 中文文档 and d2l-zh follow
# (《中文文案排版指北》), as far as a program can check them. Code spans, math, URLs, link targets
# and HTML tags are never changed or checked (they are what the English says).

_HAN = "\u4e00-\u9fff"
_CJK_PUNCT = "\u3000-\u303f\uff00-\uffef"
# code and math read as Latin text (a space on each side); link targets and tags as nothing
_PROTECTED = re.compile(r"```.*?```|`[^`\n]+`|\$\$.*?\$\$|\$[^$\n]+\$|https?://[^\s)>]+", re.S)
_NEUTRAL = re.compile(r"(?<=\])\([^)\s]+\)|<[^>\n]+>")
_SLOT = "\ue000-\uf8ff"  # a protected segment stands in the text as one private-use character
# the last `+` of C++ is Latin too (`C++ 代码`); a `+` between Chinese words is not
_LATIN = r"(?:[A-Za-z0-9\ue000-\uefff]|(?<=[A-Za-z]\+)\+)"
#: English labels with their Chinese forms (and the calque of "(checked below)").
LABELS = {
    "Then vs now（过去与现在）": "新旧对照",
    "Then vs now": "新旧对照",
    "（下面检查）": "（下面的单元格会验证）",
}


def glossary_choices() -> list[tuple[str, list[str]]]:
    """(chosen form, rejected forms) of each row of docs/glossary.md that rejects a form."""
    rows = []
    for line in (ROOT / "docs" / "glossary.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or len(cells) < 3 or cells[0] in ("English", "---"):
            continue
        rejected = [r.strip() for r in re.split(r"[、,]", cells[2]) if r.strip()]
        if rejected:
            rows.append((cells[1], rejected))
    return rows


def _shield(text: str) -> tuple[str, list[str]]:
    kept: list[str] = []

    def slot(base: int):
        def one(m: re.Match) -> str:
            kept.append(m.group())
            return chr(base + len(kept) - 1)

        return one

    text = _PROTECTED.sub(slot(0xE000), text)
    return _NEUTRAL.sub(slot(0xF000), text), kept


def _unshield(text: str, kept: list[str]) -> str:
    def back(m: re.Match) -> str:
        code = ord(m.group())
        return kept[code - (0xF000 if code >= 0xF000 else 0xE000)]

    while re.search(f"[{_SLOT}]", text):  # a link target may hold a URL's slot
        text = re.sub(f"[{_SLOT}]", back, text)
    return text


_H, _P = _HAN, _CJK_PUNCT
#: (name, pattern, replacement) of the mechanical rules; a pattern that matches is a problem.
STYLE_RULES = [
    # one space between Chinese and Latin letters, digits or code (emphasis marks in between)
    ("no space between Chinese and Latin", re.compile(rf"([{_H}])(\*{{0,2}})({_LATIN})"), r"\1 \2\3"),  # noqa: E501
    ("no space between Latin and Chinese", re.compile(rf"({_LATIN})(\*{{0,2}})([{_H}])"), r"\1\2 \3"),  # noqa: E501
    # no space next to Chinese punctuation
    ("space before Chinese punctuation", re.compile(rf"(?<=[^\s|])[ \t]+(?=[{_P}])"), ""),
    ("space after Chinese punctuation", re.compile(rf"(?<=[{_P}])[ \t]+(?=[^\s|])"), ""),
    # no space where emphasis or a Chinese quote meets Chinese text
    ("space before emphasis", re.compile(rf"(?<=[{_H}{_P}])[ \t]+(?=\*\*[{_H}])"), ""),
    ("space after emphasis", re.compile(rf"(?<=[{_H}{_P}]\*\*)[ \t]+(?=[{_H}])"), ""),
    ("space before a Chinese quote", re.compile(rf"(?<=[{_H}{_P}])[ \t]+(?=[“「])"), ""),
    ("space after a Chinese quote", re.compile(rf"(?<=[”」])[ \t]+(?=[{_H}{_P}])"), ""),
    # Chinese punctuation in a Chinese sentence
    ("ASCII punctuation after Chinese", re.compile(rf"(?<=[{_H}])[ \t]*([,;:?!])[ \t]*"), None),
    ("ASCII punctuation before Chinese", re.compile(rf"(?<=[\w)])([,;:?!])[ \t]*(?=[{_H}])"), None),
    ("ASCII parentheses around Chinese", re.compile(rf"[ \t]?\(([^()\n]*[{_H}][^()\n]*)\)[ \t]?"), r"（\1）"),  # noqa: E501
    # a bold label keeps its punctuation outside: **新旧对照**。正文 (CONTRIBUTING: **标题**。正文),
    # not **新旧对照。** 正文, which renders but is the other convention (a bold line of its own,
    # a heading in all but name, is left alone)
    ("punctuation inside a bold label", re.compile(r"(?:^|(?<=[\s（(]))\*\*([^*\n（]{1,40}?)([。：])\*\*[ ]?(?=\S)", re.M), r"**\1**\2"),  # noqa: E501
    # a citation names its authors "X 等人" (docs/glossary.md, "et al."), never "X 等": before a
    # year, a colon or comma and a title, "等" reads as the verb "wait" or as "and so on"
    ("citation with 等 (write 等人)", re.compile(r"([A-Z][a-z]+) 等(?=[，（]\d{4}|[：，][*\"“]|[，：]\s*\*)"), r"\1 等人"),  # noqa: E501
]  # fmt: skip
_FULL = {",": "，", ";": "；", ":": "：", "?": "？", "!": "！"}
#: A wrapped line that meets emphasis or a Chinese quote: Markdown renders the break as a space.
_WRAP = [
    re.compile(rf"(?<=[{_H}{_P}])\n(?=\*{{1,2}}[^*\s]|[“「])"),
    re.compile(rf"(?<=[{_H}{_P}]\*\*)\n(?=[{_H}])"),
    re.compile(rf"(?<=[”」])\n(?=[{_H}])"),
]


def style_problems(text: str, markdown: bool = True) -> list[str]:
    """What breaks the style sheet in one translated text (an empty list when nothing);
    `markdown=False` for plain text (a judge's message: `2**-24` there is a power, not bold)."""
    found = [f"English label {label!r}" for label in LABELS if label in text]
    body, _ = _shield(text)
    rules = [(name, p) for name, p, _ in STYLE_RULES] + [
        ("wrapped line at emphasis", p) for p in _WRAP
    ]
    for name, pattern in rules:
        for m in pattern.finditer(body):
            where = body[max(0, m.start() - 12) : m.end() + 12].replace("\n", "⏎")
            found.append(f"{name}: …{re.sub(f'[{_SLOT}]', '·', where)}…")
    if markdown:
        found += [f"bold that does not render: **{i[:40]}**" for i in _unrendered_bold(text)]
    return found


_BOLD = re.compile(r"\*\*([^*\n]+?)\*\*")
_MARKDOWN = None


def _unrendered_bold(text: str) -> list[str]:
    """The `**X**` pairs of `text` that CommonMark (markdown-it-py, the book's parser) does not
    render as bold. A closing `**` right after Chinese punctuation and before a character
    (`**标题。**正文`) cannot close: CommonMark's flanking rules see it as an opening one, so
    the reader gets the asterisks, or one bold run up to the paragraph's next `**`."""
    global _MARKDOWN
    if "**" not in text:
        return []
    if _MARKDOWN is None:
        import markdown_it  # the book's parser (MyST-NB's dependency)

        _MARKDOWN = markdown_it.MarkdownIt("commonmark")
    masked = re.sub(r"`[^`\n]*`", lambda m: "C" * len(m.group()), text)  # ** inside code
    html = _MARKDOWN.render(text)
    return [
        text[m.start(1) : m.end(1)]
        for m in _BOLD.finditer(masked)
        if f"<strong>{_MARKDOWN.renderInline(text[m.start(1) : m.end(1)])}</strong>" not in html
    ]


def _render_bold(text: str) -> str:
    """Move Chinese punctuation out of each `**X。**` that does not render (`**X**。`)."""
    for inner in _unrendered_bold(text):
        m = re.fullmatch(rf"(.*?)([{_P}]+)", inner, re.S)
        if m:
            text = text.replace(f"**{inner}**", f"**{m.group(1)}**{m.group(2)}", 1)
    return text


def tidy(text: str) -> str:
    """`text` with the mechanical rules of the style sheet applied (labels in their Chinese form)."""  # noqa: E501
    for label, chinese in LABELS.items():
        text = text.replace(label, chinese)
    body, kept = _shield(text)
    for pattern in _WRAP:
        body = pattern.sub("", body)
    for _ in range(2):
        for _, pattern, repl in STYLE_RULES:
            body = pattern.sub(repl if repl is not None else (lambda m: _FULL[m.group(1)]), body)
    return _render_bold(_unshield(body, kept))


def changed_since(rev: str) -> list[tuple[str, int, int, int, int]]:
    """Per catalog: (notebook number, entries, entries also in `rev`, changed since `rev`,
    changed in wording: not only where lines break). `python tools/zh.py changed REV` prints
    the table (how much a line edit changed, for a pull request's note)."""
    import subprocess

    rows = []
    for path in sorted(LOCALE.glob("[0-9]*.po")):
        rel = path.relative_to(ROOT).as_posix()
        shown = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=ROOT, capture_output=True)
        old = {}
        if shown.returncode == 0:
            old = {e.msgctxt.split(":")[0]: e.msgstr for e in polib.pofile(shown.stdout.decode())}
        new = {e.msgctxt.split(":")[0]: e.msgstr for e in polib.pofile(str(path))}
        both = [k for k in new if old.get(k)]
        changed = [k for k in both if old[k] != new[k]]
        squash = lambda text: re.sub(r"\s+", "", text)  # noqa: E731
        wording = [k for k in changed if squash(old[k]) != squash(new[k])]
        rows.append((path.name[:2], len(new), len(both), len(changed), len(wording)))
    return rows


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "all"
    if command == "compatibility":
        print(f"wrote {write_compatibility().relative_to(ROOT)}")
        return 0
    if command == "changed":
        print(f"| notebook | entries | also in {argv[1]} | changed | wording changed |")
        print("|---|---:|---:|---:|---:|")
        for row in changed_since(argv[1]):
            print("| " + " | ".join(str(x) for x in row) + " |")
        return 0
    if command in ("exercises", "all"):
        update_exercises()
    for notebook in notebooks():
        if command in ("update", "all"):
            update(notebook)
        if command in ("build", "all"):
            build(notebook)
    if command in ("status", "all"):
        left = [p for nb in notebooks() for p in problems(nb)]
        for p in left:
            print(p)
        total = sum(len(markdown_cells(nbformat.read(nb, 4))) for nb in notebooks())
        print(f"zh: {total - len(left)} of {total} markdown cells translated and current")
        messages = exercise_problems()
        for p in messages:
            print(p)
        left += messages
        print(f"zh: exercises.po, {len(messages)} judge message(s) left to translate")
        return 1 if left and command == "status" else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
