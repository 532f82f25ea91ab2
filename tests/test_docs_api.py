"""docs/api.md cannot fall behind the code, and every dotted name the docs write resolves.

* the generated section of ``docs/api.md`` equals what ``docs/gen_api.py`` writes today;
* every public function and class (each package's ``__all__``) has a docstring;
* every ``et.…`` / ``effth.…`` name in backticks in ``docs/*.md`` and the README imports.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
import gen_api  # noqa: E402


def test_generated_api_section_is_current():
    stored = (ROOT / "docs" / "api.md").read_text()
    assert gen_api.BEGIN in stored, "run python docs/gen_api.py"
    assert gen_api.render(stored) == stored, "docs/api.md is stale: run python docs/gen_api.py"


def test_every_public_callable_has_a_docstring():
    missing = [f"{p}.{n}" for p, n, sig, summ in gen_api.rows()
               if not sig.startswith("constant") and not summ]
    assert not missing, missing


def _resolve(dotted: str):
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for attr in parts[k:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
NAME = re.compile(r"`(?:et|effth)((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_documented_names_resolve(page):
    bad = []
    for m in NAME.finditer(page.read_text()):
        dotted = "effth" + m.group(1)
        try:
            _resolve(dotted)
        except (ImportError, AttributeError):
            bad.append(dotted)
    assert not bad, f"{page.name}: {sorted(set(bad))}"
