r"""Array backends of the simulators: NumPy (default) or JAX (CPU, GPU or TPU, whichever JAX finds).

The Monte-Carlo simulators (:func:`~effth.simulation.simulate_ensemble`,
:func:`~effth.simulation.simulate_ntk_ensemble`, :func:`~effth.simulation.train_ensemble`) take
``backend="numpy"`` (the default, unchanged) or ``backend="jax"``.  This module is the one place
that knows about JAX; it maps the few things the simulators need onto either library:

* the array namespace ``xp`` (``numpy`` or ``jax.numpy``) used by the shared forward/backward
  pass (:mod:`effth.simulation._mlp`) and the ensemble kernels (:mod:`effth.simulation._kernels`);
* transfers: :meth:`Backend.put` (host float64 -> device) and :meth:`Backend.get` (device -> host
  ``numpy.ndarray``);
* compilation: :meth:`Backend.jit` (``jax.jit``; the identity for NumPy);
* the activation and its derivatives as functions of ``xp`` arrays (:func:`activation`), the same
  formulas as :meth:`~effth.activations.Activation.numpy` evaluated with ``jax.numpy``;
* a memory budget per chunk of networks on the device (:meth:`Backend.chunk_bytes`).

Precision: everything is float64.  JAX computes in float32 unless 64-bit types are enabled;
effth never changes the user's global JAX configuration, it enters JAX's scoped context manager
``jax.enable_x64(True)`` around its own JAX work only (:meth:`Backend.scope`), and returns NumPy
arrays.

Random numbers: ``draws="host"`` draws every Gaussian weight with the same NumPy generator calls as
the NumPy backend and moves them to the device, so a fixed seed gives the same networks and the
results agree to round-off (the summation order of the device's matrix products differs);
``draws="device"`` draws them on the device with ``jax.random`` (keys derived from the same seed),
which avoids the host-to-device transfer of every weight (the cost that dominates on an
accelerator) but gives different networks: the statistics then agree within their standard errors.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from ..errors import DomainError

__all__ = ["Backend", "BACKENDS", "DRAWS", "resolve", "activation", "has_jax", "namespace"]

#: Accepted values of ``backend=``.
BACKENDS = ("numpy", "jax")
#: Accepted values of ``draws=``.
DRAWS = ("host", "device")

#: Default per-chunk memory budget on a CPU device (bytes): JAX on CPU shares the host memory.
_CPU_CHUNK_BYTES = 256 * 2 ** 20
#: Fraction of an accelerator's memory one chunk may take (the rest: XLA workspace, fragmentation).
_DEVICE_FRACTION = 0.25
#: Most elements of one array of a chunk (32-bit indexing stays safe in every XLA kernel).
MAX_ELEMENTS = 2 ** 31 - 1


def has_jax() -> bool:
    """Whether ``import jax`` works (the optional extra ``effth[jax]``)."""
    try:
        import jax  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class Backend:
    """A resolved array backend (see the module docstring).

    Attributes
    ----------
    name : str
        ``"numpy"`` or ``"jax"``.
    draws : str
        ``"host"`` (the seed's NumPy generator, moved to the device) or ``"device"``
        (``jax.random``).
    xp : module
        ``numpy`` or ``jax.numpy``.
    """

    name: str
    draws: str
    xp: Any = field(repr=False)

    @property
    def is_numpy(self) -> bool:
        return self.name == "numpy"

    def scope(self):
        """Context manager for the backend's own work: ``jax.enable_x64(True)`` (scoped, thread-
        local; the user's global JAX settings are left alone), nothing for NumPy."""
        if self.is_numpy:
            return nullcontext()
        import jax
        if hasattr(jax, "enable_x64"):
            return jax.enable_x64(True)
        from jax.experimental import enable_x64          # pragma: no cover - JAX < 0.8
        return enable_x64()

    def put(self, a: Any):
        """Host array -> float64 array of the backend (``jax.device_put`` on the default device)."""
        a = np.asarray(a, dtype=np.float64)
        if self.is_numpy:
            return a
        import jax
        return jax.device_put(a)

    def get(self, a: Any) -> np.ndarray:
        """Backend array -> host ``numpy.ndarray`` (blocks until the device is done)."""
        return np.asarray(a)

    def jit(self, fn: Callable, **kwargs) -> Callable:
        """``jax.jit(fn, **kwargs)`` for JAX; ``fn`` itself for NumPy."""
        if self.is_numpy:
            return fn
        import jax
        return jax.jit(fn, **kwargs)

    def device(self) -> str:
        """Platform of the default device (``"cpu"``, ``"gpu"``, ``"tpu"``) or ``"cpu"`` for NumPy."""
        if self.is_numpy:
            return "cpu"
        import jax
        return jax.devices()[0].platform

    def chunk_bytes(self) -> float:
        """Memory one chunk of networks may take on the device: a quarter of an accelerator's
        memory (``memory_stats()["bytes_limit"]``), 256 MiB on a CPU (host memory, shared)."""
        if self.is_numpy:
            return float(_CPU_CHUNK_BYTES)
        import jax
        dev = jax.devices()[0]
        if dev.platform == "cpu":
            return float(_CPU_CHUNK_BYTES)
        try:
            limit = float((dev.memory_stats() or {}).get("bytes_limit", 0.0))
        except Exception:  # pragma: no cover - platform without memory statistics
            limit = 0.0
        return _DEVICE_FRACTION * limit if limit > 0 else 4.0 * 2 ** 30

    def flop_rate(self) -> float:
        """Optimistic float64 rate (FLOP/s) for the run-time bound of ``check_work``: 2 GFLOP/s
        per CPU core as elsewhere in effth, 5e13 on an accelerator (above any current GPU's
        float64 peak, so the bound never refuses a feasible run)."""
        return 2e9 if self.device() == "cpu" else 5e13

    def key(self, gen: np.random.Generator):
        """A ``jax.random`` key drawn from the NumPy generator ``gen`` (deterministic in the seed).

        The ``"rbg"`` generator (XLA's RngBitGenerator): it compiles several times faster than
        the default threefry on a CPU and is the fast one on GPUs; its bits may differ between
        platforms (the statistics do not)."""
        import jax
        return jax.random.key(int(gen.integers(0, 2 ** 63 - 1)), impl="rbg")


def namespace(a: Any):
    """Array namespace of a non-NumPy array ``a`` (a JAX array or a tracer): ``jax.numpy``."""
    import jax.numpy as jnp
    return jnp


def resolve(backend: Any = "numpy", draws: Any = "host") -> Backend:
    """Validate ``backend=`` and ``draws=`` and return the :class:`Backend`.

    Raises
    ------
    DomainError
        An unknown backend or draws, ``draws="device"`` with NumPy, or ``backend="jax"`` without JAX
        installed (the message names ``pip install effth[jax]``).
    """
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise DomainError(f"backend={backend!r}: use one of {', '.join(map(repr, BACKENDS))}")
    if not isinstance(draws, str) or draws not in DRAWS:
        raise DomainError(f"draws={draws!r}: use 'host' (the seed's NumPy generator, the same "
                          "networks on every backend) or 'device' (jax.random on the device)")
    if backend == "numpy":
        if draws != "host":
            raise DomainError("draws='device' draws with jax.random: it needs backend='jax'")
        return Backend("numpy", "host", np)
    try:
        import jax.numpy as jnp
    except ImportError:
        raise DomainError("backend='jax' needs JAX, which is not installed; install the optional "
                          "extra with `pip install effth[jax]` (CPU), or JAX for your accelerator "
                          "(https://docs.jax.dev/en/latest/installation.html)") from None
    return Backend("jax", draws, jnp)


# ----------------------------------------------------------------------- activations on jnp
def _hermeval(x, c):
    """``numpy.polynomial.hermite_e.hermeval`` (Clenshaw recursion, same operation order)."""
    if len(c) == 1:
        c0, c1 = c[0], 0.0
    elif len(c) == 2:
        c0, c1 = c[0], c[1]
    else:
        nd = len(c)
        c0, c1 = c[-2], c[-1]
        for i in range(3, len(c) + 1):
            tmp = c0
            nd = nd - 1
            c0 = c[-i] - c1 * (nd - 1)
            c1 = tmp + c1 * x
    return c0 + c1 * x


def _polyval(x, c):
    """``numpy.polynomial.polynomial.polyval`` (Horner, same operation order)."""
    out = c[-1] + 0 * x
    for ci in c[-2::-1]:
        out = ci + out * x
    return out


def _impl_jax(act, order: int) -> Callable:
    """The formula of ``act.numpy(order)`` (effth.activations.builtin) written with jax.numpy."""
    import jax.numpy as jnp
    import jax.scipy.special as jsp
    from numpy.polynomial import polynomial as _P

    fam = act.family
    params = dict(act.params)
    if fam == "polynomial":
        if "coeffs" in params:
            c = np.array([float(x) for x in params["coeffs"]])
        else:
            c = np.array([0.0] * int(params["degree"]) + [1.0])
        d = _P.polyder(c, order) if order else c
        if d.size == 0:
            d = np.zeros(1)
        return lambda z: _polyval(z, [float(x) for x in d])
    if fam == "piecewise_linear":
        ap, am = float(params["a_plus"]), float(params["a_minus"])
        if order == 0:
            return lambda z: jnp.where(z >= 0, ap * z, am * z) + 0.0
        if order == 1:
            return lambda z: jnp.where(z >= 0, ap, am) + 0.0 * z
        return jnp.zeros_like
    if fam == "step":
        hi, lo = float(params["high"]), float(params["low"])
        if order == 0:
            return lambda z: jnp.where(z >= 0, hi, lo) + 0.0 * z
        return jnp.zeros_like
    if fam in ("tanh", "sigmoid", "softplus", "swish"):
        base = jnp.tanh if fam == "tanh" else jsp.expit
        chain = np.array([1.0, 0.0, -1.0]) if fam == "tanh" else np.array([0.0, 1.0, -1.0])

        def poly_in(k: int) -> Callable:
            c = np.array([0.0, 1.0])
            for _ in range(k):
                c = _P.polymul(_P.polyder(c), chain)
            if k == 0:
                return base
            c = [float(x) for x in c[::-1]]

            def f(z):
                u = base(z)
                if len(c) == 1:
                    return jnp.full_like(u, c[0])
                out = u * c[0] + c[1]
                for ci in c[2:]:
                    out = out * u + ci
                return out
            return f
        if fam in ("tanh", "sigmoid"):
            return poly_in(order)
        if fam == "softplus":
            return (lambda z: jnp.logaddexp(0.0, z)) if order == 0 else poly_in(order - 1)
        g_n = poly_in(order)                                  # swish = z * sigmoid(z)
        g_m = poly_in(order - 1) if order else None
        return (lambda z: z * g_n(z)) if not order else (lambda z: z * g_n(z) + order * g_m(z))
    if fam in ("erf", "gelu"):
        inv = 1.0 / math.sqrt(2.0 * math.pi)

        def phi(k: int) -> Callable:                          # derivatives of the normal CDF
            if k == 0:
                return jsp.ndtr
            c = [0.0] * k
            c[-1] = inv * (-1.0) ** (k - 1)
            return lambda z: jnp.where(jnp.abs(z) > 80.0, 0.0,
                                       _hermeval(z, c) * jnp.exp(-0.5 * z * z))
        if fam == "erf":
            if order == 0:
                return jsp.erf
            p, scale = phi(order), 2.0 * math.sqrt(2.0) ** order
            return lambda z: scale * p(math.sqrt(2.0) * z)
        g_n = phi(order)
        g_m = phi(order - 1) if order else None
        return (lambda z: z * g_n(z)) if not order else (lambda z: z * g_n(z) + order * g_m(z))
    if fam == "trig":
        shift = 0 if params["kind"] == "sin" else 1
        cycle = (jnp.sin, jnp.cos, lambda z: -jnp.sin(z), lambda z: -jnp.cos(z))
        return cycle[(order + shift) % 4]
    # user activations (and any family not listed): the SymPy derivative printed for JAX
    import sympy as sp
    from ..activations.registry import Z
    expr = act.derivative_expr(order)
    f = sp.lambdify(Z, expr, modules="jax")
    return lambda z: jnp.broadcast_to(jnp.asarray(f(z), dtype=z.dtype), z.shape)


@lru_cache(maxsize=256)
def _activation_cached(act, order: int, name: str) -> Callable:
    return _impl_jax(act, order)


def activation(act, order: int, be: Backend) -> Callable:
    """``sigma^(order)`` of the :class:`~effth.activations.Activation` ``act`` as a function of
    ``be.xp`` arrays: ``act.numpy(order)`` for NumPy, the same formula in ``jax.numpy`` for JAX."""
    if be.is_numpy:
        return act.numpy(order)
    return _activation_cached(act, int(order), be.name)
