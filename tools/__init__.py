"""Project tools: the book (book.py), slide metadata and export (slides.py), the Chinese edition
(zh.py). Each runs as a script from the repository root (`python tools/zh.py ...`, see the
Makefile) and imports as `tools.<name>` in the tests."""
