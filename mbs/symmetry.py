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

from mbs.errors import ForceFunctionError
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


def _products(model: Model, t: float, q: np.ndarray, p: np.ndarray, kind: str, about
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The invariance products at one state for the world axes, and their bounds.

    The products are linear in the axis e (xi is), so the rows of ``products`` (rows, 3)
    hold, per product, its values along x, y, z: grad V . xi, Q . xi (with applied forces)
    and the rows of G xi (only on the constraints, see :func:`invariance_defects`).
    ``row_bounds`` (rows,) are the norms of grad V, Q and of the rows of G, and
    ``generator`` (3, n) the generators of the world axes, so that a product along a unit
    e is bounded by row bound times |generator^T e|."""
    generator = generators(model, q, kind, about)
    gradient = model.potential_gradient(q)
    products, bounds = [generator @ gradient], [np.linalg.norm(gradient)]
    if model.has_applied_forces:
        force = model.applied_force(t, q, model.apply_inverse_mass(p))
        products.append(generator @ force)
        bounds.append(np.linalg.norm(force))
    rows = [np.vstack(products)]
    if model.m and np.max(np.abs(model.constraints(q, t))) <= POSITION_TOLERANCE:
        jacobian = model.constraint_jacobian(q, t)
        rows.append(np.asarray(jacobian @ generator.T))  # (m, 3)
        bounds.append(np.sqrt(np.asarray(
            jacobian.multiply(jacobian).sum(axis=1)
            if hasattr(jacobian, "multiply") else (jacobian**2).sum(axis=1))).ravel())
    return np.vstack(rows), np.hstack([np.ravel(b) for b in bounds]), generator


def _evaluable_products(model: Model, states: list[tuple[float, np.ndarray, np.ndarray]],
                        kind: str, about):
    """:func:`_products` at each of ``states`` where the model's functions can be evaluated.
    A state at which a load or a user potential raises (the last state of a run that this
    stopped) says nothing about the symmetry and is left out."""
    for t, q, p in states:
        try:
            yield _products(model, t, q, p, kind, about)
        except ForceFunctionError:
            continue


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
    axes = np.eye(3) if axes is None else np.atleast_2d(np.asarray(axes, dtype=float))
    worst = np.zeros(axes.shape[0])
    for products, row_bounds, generator in _evaluable_products(model, states, kind, about):
        sizes = np.linalg.norm(axes @ generator, axis=1)
        defects = _relative(products @ axes.T, row_bounds[:, None] * sizes[None, :])
        worst = np.maximum(worst, defects.max(axis=0))
    return worst


def conserved_directions(model: Model, states: list[tuple[float, np.ndarray, np.ndarray]],
                         kind: str, about=(0.0, 0.0, 0.0)) -> np.ndarray:
    """An orthonormal basis (rows, shape (k, 3)) of the directions e whose momentum
    component (linear along e, or angular about the axis e through ``about``) is a first
    integral of the model, at ``states`` that should be generic (:func:`generic_states`).

    The products at all states, each divided by its Cauchy-Schwarz bound over unit axes,
    form a matrix A (rows, 3) with A e = 0 exactly for the symmetry directions; the basis
    is the right singular vectors of A whose singular values are at most
    :data:`INVARIANCE_TOLERANCE` (a singular value bounds every product along its vector).
    The bound over unit axes uses the largest generator (spectral norm), so that A is
    linear in e. The directions need not be world axes: under gravity along
    (0.6, 0, -0.8), the linear momentum is conserved in the plane normal to it."""
    scaled = []
    for products, row_bounds, generator in _evaluable_products(model, states, kind, about):
        if not (np.all(np.isfinite(generator)) and np.all(np.isfinite(products))):
            return np.zeros((0, 3))  # states that are not numbers show no symmetry
        bound = row_bounds * np.linalg.norm(generator, 2)
        keep = bound > 0.0  # a vanishing bound leaves nothing to break the symmetry
        scaled.append(products[keep] / bound[keep, None])
    # zero rows keep at least three rows (a full set of right singular vectors) and change
    # nothing else; the thin SVD costs O(rows) where the full one would cost O(rows^2)
    matrix = np.vstack(scaled + [np.zeros((3, 3))])
    if not np.all(np.isfinite(matrix)):  # overflowing bounds
        return np.zeros((0, 3))
    _, singular, right = np.linalg.svd(matrix, full_matrices=False)
    return right[singular <= INVARIANCE_TOLERANCE]


def symmetry_axis_points(model: Model, states: list[tuple[float, np.ndarray, np.ndarray]]
                         ) -> list[np.ndarray]:
    """Points on the axes of the rotational symmetries of the model, wherever those axes
    lie (a bead on a surface of revolution about an axis through no pivot or anchor), one
    per rotation found at ``states`` (which should be generic, :func:`generic_states`).

    A rotation about the axis w through c acts as the rotation about the parallel axis
    through the origin followed by the translation v = -w x c, so the symmetries are the
    (v, w) that make every product of :func:`conserved_directions` vanish for the
    generator translation(v) + rotation(w) (linear in (v, w)); each null vector with w != 0
    gives the point c = w x v / |w|^2 of its axis nearest the origin (for a screw symmetry
    that axis is not one of a rotation, and the check about c finds none)."""
    parts = []
    for t, q, p in states:
        try:
            linear, bounds, moving = _products(model, t, q, p, "translation", (0.0, 0.0, 0.0))
            angular, _, turning = _products(model, t, q, p, "rotation", (0.0, 0.0, 0.0))
        except ForceFunctionError:
            continue
        parts.append((linear, angular, bounds, np.linalg.norm(moving, 2),
                      np.linalg.norm(turning, 2)))
    if not parts:
        return []
    # fixed column scales (the largest generators), so that rows of all states combine
    scale_v = max(part[3] for part in parts) or 1.0
    scale_w = max(part[4] for part in parts) or 1.0
    rows = [np.hstack([linear[bounds > 0.0] / (bounds[bounds > 0.0, None] * scale_v),
                       angular[bounds > 0.0] / (bounds[bounds > 0.0, None] * scale_w)])
            for linear, angular, bounds, _, _ in parts]
    matrix = np.vstack(rows + [np.zeros((6, 6))])
    if not np.all(np.isfinite(matrix)):
        return []
    _, singular, right = np.linalg.svd(matrix, full_matrices=False)
    points = []
    for vector in right[singular <= INVARIANCE_TOLERANCE]:
        v, w = vector[:3] / scale_v, vector[3:] / scale_w
        if np.linalg.norm(vector[3:]) > 1e-6:
            point = np.cross(w, v) / (w @ w)
            # round-off of the null vector, not a position: a printed axis point reads 0
            size = max(float(np.linalg.norm(point)), model.length_scale)
            points.append(np.where(np.abs(point) <= 1e-10 * size, 0.0, point))
    return points


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
    """Boolean per axis (default: the world axes): whether that momentum component is a
    first integral of the model, i.e. the axis lies among :func:`conserved_directions` at
    ``states``, which should hold generic ones (:func:`generic_states`)."""
    axes = np.eye(3) if axes is None else np.atleast_2d(np.asarray(axes, dtype=float))
    return in_span(conserved_directions(model, states, kind, about), axes)


def in_span(directions: np.ndarray, axes: np.ndarray) -> np.ndarray:
    """Booleans: whether each unit row of ``axes`` lies in the span of the orthonormal
    rows ``directions`` (to 1e-6: the invariance check separates conserved directions from
    broken ones by orders of magnitude)."""
    inside = axes @ directions.T @ directions
    return np.linalg.norm(axes - inside, axis=1) <= 1e-6
