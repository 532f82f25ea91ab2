"""``predict(..., widths=n)``: its progress bar follows ``progress=``, and it warns (WidthWarning,
the criterion of ``flow``: L/n and max V/(n K^2)) when the 1/n expansion is unreliable."""

import warnings

import numpy as np
import pytest

import effth as et
from effth.errors import DomainError
from effth.pdlt import WidthWarning
from effth.pdlt.initialization.kernel_flow import WIDTH_LIMIT, width_figures

X = np.array([[1.0, 0.2], [-0.4, 1.1], [0.7, -0.9], [0.3, 0.5]])
Y = np.array([0.3, -0.2, 0.5])
NET = et.MLP("tanh", depth=3, c_w=1.1)


def _predict(width, **kw):
    return et.predict(NET, X[:3], Y, X[3:], widths=width, **kw)


def test_width_warning_names_its_criterion_and_fires_only_when_unreliable():
    # the criterion computed independently: depth over width and the vertex at the diagonal
    fl = et.flow(NET, X)
    L = NET.depth
    d = np.einsum("laa->la", fl.K)
    vn = np.einsum("laaaa->la", fl.V)[1:] / d[1:] ** 2          # V/K^2 of layers 2..L
    for n in (2, 1000):
        expected = L / n > WIDTH_LIMIT or vn.max() / n > WIDTH_LIMIT
        assert np.isclose(width_figures(fl, n)[1], vn.max() / n, rtol=1e-12)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            _predict(n, progress=False)
        hits = [w for w in rec if issubclass(w.category, WidthWarning)]
        assert bool(hits) == expected, (n, [str(w.message) for w in rec])
        if hits:
            msg = str(hits[0].message)
            assert f"L/n = {L / n:.2f}" in msg and "V/(n K^2)" in msg and f"widths={n}" in msg
            assert hits[0].filename == __file__           # points at the caller's line


def test_progress_bar_follows_progress_argument(capsys):
    _predict(64, progress=False)
    assert capsys.readouterr().err == ""
    _predict(64, progress=True)
    assert "ntk_flow" in capsys.readouterr().err
    with pytest.raises(DomainError, match="progress"):
        _predict(64, progress="yes")
