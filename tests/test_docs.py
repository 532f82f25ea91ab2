"""Every ```python block of ``docs/*.md`` runs.

The blocks of one page run in order in one namespace, as a reader pasting them into one session
would, with stdout captured and matplotlib on the Agg backend.  A failure names the page, the block
number (0-based, counting only ```python blocks) and the error.  A page whose examples take minutes
opts out of the default run with the HTML comment ``<!-- docs-test: slow -->``; it then runs only
under ``-m slow`` / ``EFFTH_SLOW=1`` (the ``opt_in_slow`` fixture).  Listings that are not meant to
run (signatures, shell sessions) belong in ```text blocks.  A block written as an interactive
session (its first line starts with ``>>>``) runs as a doctest in the page's namespace, so the output
it shows is compared (whitespace normalized, ``...`` matches anything).
"""

from __future__ import annotations

import contextlib
import doctest
import io
import pathlib
import re
import traceback

import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```", re.S | re.M)
SLOW = "<!-- docs-test: slow -->"


def _pages() -> list[pathlib.Path]:
    return sorted(p for p in DOCS.glob("*.md") if BLOCK.search(p.read_text(encoding="utf-8")))


PAGES = _pages()


def test_some_pages_have_python_blocks():
    assert PAGES, f"no ```python blocks found under {DOCS}"


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_blocks_run(page: pathlib.Path, request, tmp_path, monkeypatch):
    text = page.read_text(encoding="utf-8")
    if SLOW in text:
        request.getfixturevalue("opt_in_slow")
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.chdir(tmp_path)  # files a page writes land in a scratch folder
    namespace: dict = {"__name__": "__docs__"}
    failure = None
    try:
        for k, match in enumerate(BLOCK.finditer(text)):
            line = text.count("\n", 0, match.start(1)) + 1
            label = f"docs/{page.name} python block {k} (line {line})"
            block = match.group(1)
            if block.lstrip().startswith(">>>"):
                failure = _run_session(block, label, namespace)
                if failure:
                    break
                continue
            try:
                code = compile(block, label, "exec")
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(code, namespace)
            except Exception as exc:  # noqa: BLE001 - reported with page and block
                failure = f"{label} failed: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-3)}"
                break
    finally:
        plt.close("all")
    if failure:
        pytest.fail(failure, pytrace=False)


def _run_session(block: str, label: str, namespace: dict) -> str | None:
    """Run a ``>>>`` block as a doctest in ``namespace``; the report of its failures, or None."""
    test = doctest.DocTestParser().get_doctest(block, namespace, label, label, 0)
    test.globs = namespace  # the page's namespace itself, so later blocks see its names
    report = io.StringIO()
    runner = doctest.DocTestRunner(
        optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS, verbose=False)
    runner.run(test, out=report.write, clear_globs=False)
    if runner.failures:
        return f"{label}: {runner.failures} of {runner.tries} examples differ or raise\n{report.getvalue()}"
    return None
