"""Generate the "Every public name" section of ``docs/api.md`` from the code.

Each public package's ``__all__`` is listed with the object's signature and the first line of its
docstring, so the page cannot fall behind the code: ``tests/test_docs_api.py`` regenerates the
section and fails when the stored page differs (or a public name has no docstring).

Usage::

    python docs/gen_api.py          # rewrites the section in docs/api.md
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api.md"
BEGIN = "<!-- BEGIN GENERATED: python docs/gen_api.py -->"
END = "<!-- END GENERATED -->"

#: the packages a user imports, in the order the page lists them
PACKAGES = ["effth", "effth.pdlt", "effth.pdlt.initialization", "effth.pdlt.ntk",
            "effth.pdlt.learning", "effth.pdlt.criticality", "effth.pdlt.deep_linear",
            "effth.pdlt.depth_asymptotics", "effth.dmft", "effth.dmft.rules", "effth.simulation", "effth.data",
            "effth.arch", "effth.compare", "effth.printing", "effth.printing.formula",
            "effth.algebra.tensors", "effth.algebra.ntk_tensors", "effth.algebra.indices",
            "effth.algebra.expectation", "effth.algebra.wick", "effth.algebra.cumulants",
            "effth.algebra.action", "effth.activations", "effth.numerics", "effth.codegen",
            "effth.errors"]


def _summary(obj) -> str:
    if not (inspect.isclass(obj) or callable(obj) or inspect.ismodule(obj)):
        r = re.sub(r"\s+", " ", repr(obj))
        return "value `" + (r if len(r) <= 70 else r[:67] + "...") .replace("|", "\\|") + "`"
    doc = inspect.getdoc(obj) or ""
    line = doc.strip().split("\n\n")[0].replace("\n", " ").strip()
    line = re.sub(r"\s+", " ", line)
    return line.replace("|", "\\|")


def _signature(name: str, obj) -> str:
    if inspect.isclass(obj):
        kind = "class"
        try:
            sig = str(inspect.signature(obj))
        except (TypeError, ValueError):
            sig = "(...)"
    elif callable(obj):
        kind = "function"
        try:
            sig = str(inspect.signature(obj))
        except (TypeError, ValueError):
            sig = "(...)"
    else:
        return "constant"
    sig = re.sub(r"\s+", " ", sig)
    if len(sig) > 90:
        sig = sig[:87] + "...)"
    return f"{kind} `{name}{sig}`".replace("|", "\\|")


def rows() -> list:
    """``[(package, name, signature, summary)]`` over :data:`PACKAGES`, each object once."""
    seen, out = set(), []
    for pkg in PACKAGES:
        mod = importlib.import_module(pkg)
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name)
            key = id(obj) if (inspect.isclass(obj) or inspect.isfunction(obj)) else (pkg, name)
            if key in seen:
                continue
            seen.add(key)
            out.append((pkg, name, _signature(name, obj), _summary(obj)))
    return out


def section() -> str:
    lines = [BEGIN, "", "## Every public name", "",
             "Generated from the code (`python docs/gen_api.py`): each package's `__all__`, "
             "listed once where it is first exported, with its signature and the first "
             "sentence of its docstring.", ""]
    pkg = None
    for p, name, sig, summ in rows():
        if p != pkg:
            lines += ["", f"### `{p}`", "", "| name | signature | what it is |", "|---|---|---|"]
            pkg = p
        lines.append(f"| `{name}` | {sig} | {summ} |")
    lines += ["", END]
    return "\n".join(lines) + "\n"


def render(text: str) -> str:
    """``docs/api.md``'s text with the generated section replaced (appended if absent)."""
    if BEGIN in text:
        head = text[:text.index(BEGIN)]
        tail = text[text.index(END) + len(END):].lstrip("\n")
        return head + section() + ("\n" + tail if tail else "")
    return text.rstrip("\n") + "\n\n" + section()


def main() -> int:
    API.write_text(render(API.read_text()))
    print(f"{API.relative_to(ROOT)}: {len(rows())} public names")
    return 0


if __name__ == "__main__":
    sys.exit(main())
