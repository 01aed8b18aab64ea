"""Project-wide pytest policy.

nbval policy (`pytest --nbval`, strict; options in pyproject.toml):
- Compared: every output kind nbval knows except images and widget views: stdout, **stderr**,
  text/plain, text/html and text/markdown. Stderr is compared on purpose: a new warning from a
  torch upgrade is news a reader would see, so notebooks keep stderr empty (warnings they
  expect are filtered in the setup cell) and a change shows up as a diff.
- Not compared: image/png and image/jpeg (pixel output depends on fonts and the renderer; the
  cell that draws a plot asserts the numbers it plots) and widget views (random model ids; a
  widget's content is built by a pure function that a plain cell prints).
- Sanitized before comparing: tests/nbval_sanitize.cfg (addresses, ports, pids, temp paths,
  ipykernel file names, site-packages paths, torch log prefixes, tagged timings).
- Cell timeout 600 s: generous, because a timeout marks every later cell of the notebook as
  failed and hides the real cause; the per-notebook budget (~90 s) is watched in the note.
- Cells whose output depends on hardware or timing carry `# NBVAL_IGNORE_OUTPUT` and still
  `assert` their claim; cells that fail on purpose carry `# NBVAL_RAISES_EXCEPTION`.

`pytest --nbval-lax` runs the same notebooks comparing only cells marked `# NBVAL_CHECK_OUTPUT`
(none are: every claim is an assert), so a GPU machine or a newer torch still checks the
teaching without failing on a changed repr.
"""

# The Chinese edition (notebooks/zh) is generated from the English notebooks with identical code
# and outputs (tests/test_zh.py proves it cell by cell), so nbval runs the English ones only.
collect_ignore_glob = ["notebooks/zh/*"]
