"""Progress bars: off in tests, on when asked, never in the way of results."""

from __future__ import annotations

import io

import pytest

from effth._progress import progress_bar, progress_enabled


def test_off_by_environment_and_explicit_flags_win(monkeypatch):
    monkeypatch.setenv("EFFTH_PROGRESS", "0")
    assert not progress_enabled(None)
    assert progress_enabled(True) and not progress_enabled(False)
    monkeypatch.setenv("EFFTH_PROGRESS", "1")
    assert progress_enabled(None)
    with pytest.raises(ValueError, match="progress"):      # effth.DomainError
        progress_enabled("yes")
    with pytest.raises(ValueError, match="progress"):
        progress_enabled(1)


def test_a_bar_draws_when_asked(monkeypatch):
    buf = io.StringIO()
    monkeypatch.setattr("sys.stderr", buf)
    with progress_bar(3, "sweeps", progress=True) as bar:
        for _ in range(3):
            bar.update()
    assert "sweeps" in buf.getvalue()
    buf2 = io.StringIO()
    monkeypatch.setattr("sys.stderr", buf2)
    with progress_bar(3, "sweeps", progress=False) as bar:
        bar.update()
    assert buf2.getvalue() == ""


def test_entry_points_draw_their_bar(monkeypatch, capsys):
    import numpy as np
    import effth as et
    X = np.eye(2)
    et.simulate_ensemble(et.MLP("tanh", depth=2, widths=4), X, networks=8, seed=0, progress=True)
    et.flow(et.MLP("tanh", depth=3), X, progress=True)
    err = capsys.readouterr().err
    assert err.count("it/s") + err.count("s/it") >= 2 or err.count("|") >= 2
