"""Which momentum maps a model conserves, from the invariance of its equations (Noether).

The linear momentum along a unit vector e is conserved by the exact flow when translating every
centre of mass and particle along e leaves the potential, the constraints and the applied
forces' power unchanged; the angular momentum about an axis e through c, when rotating every
3-block about that axis does (positions about c, directors about the origin). In director
coordinates both actions are linear, q -> q + s xi(q), with the generator

    translation:  xi = e on position blocks, 0 on directors,
    rotation:     xi = e x (x - c) on position blocks, e x d on directors,

and the mass matrix is invariant under both, so the momentum p . xi(q) is a first integral
exactly when, along the motion,

    grad V(q) . xi = 0,   G(q, t) xi = 0,   Q(t, q, v) . xi = 0.

:func:`invariance_defects` evaluates these three products, each relative to its
Cauchy-Schwarz bound, at given states; a momentum whose defects are at round-off at every state
is conserved by the model, and a symmetric scheme (EM, GGL-VI) then conserves it too.
"""

from __future__ import annotations

import numpy as np

from mbs.model import POSITION_TOLERANCE, Model

#: A relative invariance defect below this counts as round-off.
INVARIANCE_TOLERANCE = 1e-9


def generators(model: Model, q: np.ndarray, kind: str, about=(0.0, 0.0, 0.0),
               axes: np.ndarray | None = None) -> np.ndarray:
    """Generators xi(q) (one row per axis, shape (axes, n)) of translations (``kind`` =
    "translation") or rotations about ``about`` ("rotation") along the unit ``axes``
    (default: the world axes)."""
    axes = np.eye(3) if axes is None else np.atleast_2d(np.asarray(axes, dtype=float))
    blocks = np.asarray(q, dtype=float).reshape(-1, 3)
    xi = np.zeros((axes.shape[0],) + blocks.shape)
    if kind == "translation":
        xi[:, model.point_blocks, :] = axes[:, None, :]
    elif kind == "rotation":
        arms = blocks.copy()
        arms[model.point_blocks] -= np.asarray(about, dtype=float)
        xi[...] = np.cross(axes[:, None, :], arms[None, :, :])
    else:
        raise ValueError(f"kind must be 'translation' or 'rotation', not {kind!r}")
    return xi.reshape(axes.shape[0], -1)


def _relative(products: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """|products| / bound, 0 where the bound vanishes (nothing to break the symmetry)."""
    out = np.zeros_like(products)
    positive = bound > 0.0
    out[positive] = np.abs(products[positive]) / bound[positive]
    return out


def invariance_defects(model: Model, states: list[tuple[float, np.ndarray, np.ndarray]],
                       kind: str, about=(0.0, 0.0, 0.0), axes: np.ndarray | None = None
                       ) -> np.ndarray:
    """The largest relative invariance defect per axis (shape (axes,)) over ``states``, a
    list of (t, q, p).

    The constraint products are taken only at states that satisfy the constraints to
    :data:`mbs.model.POSITION_TOLERANCE`: off the constraint manifold G xi picks up the
    residual (schemes such as GGL-VI A enforce g only between step ends)."""
    worst = None
    for t, q, p in states:
        xi = generators(model, q, kind, about, axes)
        size = np.linalg.norm(xi, axis=1)
        gradient = model.potential_gradient(q)
        defects = [_relative(xi @ gradient, size * np.linalg.norm(gradient))]
        if model.has_applied_forces:
            force = model.applied_force(t, q, model.apply_inverse_mass(p))
            defects.append(_relative(xi @ force, size * np.linalg.norm(force)))
        if model.m and np.max(np.abs(model.constraints(q, t))) <= POSITION_TOLERANCE:
            jacobian = model.constraint_jacobian(q, t)
            rows = np.asarray(jacobian @ xi.T)  # (m, axes)
            row_norms = np.sqrt(np.asarray(
                jacobian.multiply(jacobian).sum(axis=1)
                if hasattr(jacobian, "multiply") else (jacobian**2).sum(axis=1))).ravel()
            bound = row_norms[:, None] * size[None, :]
            defects.append(_relative(rows, bound).max(axis=0))
        state_worst = np.max(defects, axis=0)
        worst = state_worst if worst is None else np.maximum(worst, state_worst)
    return worst


def generic_states(model: Model, states: list[tuple[float, np.ndarray, np.ndarray]],
                   size: float = 1e-5, seed: int = 0
                   ) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """``states`` and, for each, a neighbour: q and p moved randomly by ``size`` (relative to
    :attr:`mbs.Model.length_scale` and to |p|) and projected back onto the constraints.

    A motion can stay in a subspace where a product above vanishes without a symmetry (a
    pendulum swinging in a plane has G xi = 0 for translations normal to it); its
    neighbours leave that subspace, so only a symmetry of the model passes at all of them
    (a defect grows in proportion to the distance from the subspace: ``size`` is far above
    :data:`INVARIANCE_TOLERANCE`, and small enough for the projection to converge in a few
    iterations). A neighbour whose projection fails (a singular configuration) is left
    out."""
    rng = np.random.default_rng(seed)
    out = list(states)
    for t, q, p in states:
        moved_q = q + size * model.length_scale * rng.standard_normal(q.size)
        moved_p = p + size * max(float(np.abs(p).max()), 1.0) * rng.standard_normal(p.size)
        if model.m:
            try:
                moved_q, moved_p = model.project(moved_q, moved_p, t=t)
            except (ArithmeticError, ValueError, RuntimeError, np.linalg.LinAlgError):
                continue
        if np.all(np.isfinite(moved_q)) and np.all(np.isfinite(moved_p)):
            out.append((t, moved_q, moved_p))
    return out


def conserved_axes(model: Model, states: list[tuple[float, np.ndarray, np.ndarray]],
                   kind: str, about=(0.0, 0.0, 0.0), axes: np.ndarray | None = None
                   ) -> np.ndarray:
    """Boolean per axis: whether that momentum component is a first integral of the model:
    its invariance defects are at round-off at every state of ``states``, which should hold
    generic ones (:func:`generic_states`)."""
    return invariance_defects(model, states, kind, about, axes) <= INVARIANCE_TOLERANCE
