"""Progress reporting for effth's long runs (ensembles, Monte-Carlo DMFT sweeps, series stages).

Every long-running entry point takes ``progress=None | bool``:

* ``True`` shows a ``tqdm`` bar (in Jupyter the notebook widget when ``ipywidgets`` is installed,
  else the text bar on stderr);
* ``False`` shows nothing;
* ``None`` (the default) follows ``$EFFTH_PROGRESS`` (``0``/``1``); unset, a bar is shown only
  when stderr is a terminal or the code runs in a notebook kernel.  The test suite sets
  ``EFFTH_PROGRESS=0``.

Examples
--------
>>> from effth._progress import progress_bar
>>> with progress_bar(3, "demo", progress=False) as bar:
...     for _ in range(3):
...         bar.update()
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator

import numpy as np

from .errors import DomainError

__all__ = ["progress_bar", "progress_enabled"]


class _Silent:
    """A bar that draws nothing (same methods as the ``tqdm`` ones effth uses)."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def set_description_str(self, s: str = "", refresh: bool = True) -> None:
        pass


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ip = shell.get_ipython()          # type: ignore[attr-defined]
    except Exception:                      # pragma: no cover - IPython internals vary
        return False
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def progress_enabled(progress: bool | None = None) -> bool:
    """Whether a long run should draw a progress bar (see the module docstring)."""
    if progress is not None:
        if not isinstance(progress, (bool, np.bool_)):
            raise DomainError(f"progress must be True, False or None, got {progress!r}")
        return bool(progress)
    env = os.environ.get("EFFTH_PROGRESS")
    if env is not None:
        return env.strip().lower() not in ("0", "", "false", "no", "off")
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):   # closed or replaced stderr
        tty = False
    return tty or _in_notebook()


@contextmanager
def progress_bar(total: int | None, desc: str, *, progress: bool | None = None,
                 unit: str = "it") -> Iterator:
    """A ``tqdm`` bar over ``total`` steps, or a silent stand-in when progress is off."""
    if not progress_enabled(progress):
        yield _Silent()
        return
    try:
        from tqdm import tqdm
        if _in_notebook():
            try:                           # the widget bar needs ipywidgets; else the text bar
                import ipywidgets  # noqa: F401
                from tqdm.notebook import tqdm
            except ImportError:
                pass
    except ImportError:                    # pragma: no cover - tqdm is a dependency
        yield _Silent()
        return
    bar = tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True)
    try:
        yield bar
    finally:
        bar.close()
