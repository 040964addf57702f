"""Uniform gravity and central (Newtonian) gravity with the gravity-gradient torque."""

from __future__ import annotations

import numpy as np

from mbs.bodies.base import Body
from mbs.errors import ModelError, ModelTypeError
from mbs.forces.base import Force, Invariant, InvariantTerm, TermInstance, dot, squared_distance
from mbs.quadratic import AffineVector
from mbs.validation import as_scalar, as_vector


class UniformGravityTerm(InvariantTerm):
    """V = -m |g| pi with pi = phi . g/|g| (linear, so every discrete gradient is exact)."""

    n_invariants = 1
    polynomial_degree = 1

    @classmethod
    def energy(cls, pi, params):
        return -params["weight"] * pi[:, 0]

    @classmethod
    def gradient(cls, pi, params):
        return -params["weight"][:, None] * np.ones_like(pi)

    @classmethod
    def hessian(cls, pi, params):
        return np.zeros((pi.shape[0], 1, 1))


class FieldForce(Force):
    """A force field acting on a list of bodies (None = every body of the system)."""

    is_field = True
    _bodies: list | None = None

    def bodies_acted_on(self):
        return self._bodies if self._bodies is not None else [
            b for b in self.system.bodies if b.n_coordinates > 0]

    def referenced_bodies(self):
        return self._bodies or []


class UniformGravity(FieldForce):
    """Uniform gravitational field ``acceleration`` acting on ``bodies`` (None = all bodies).

    ``mbs.System(gravity=...)`` adds one automatically. V = -m g . phi per body, phi being the
    centre of mass (seed 003, section 6.2).
    """

    def __init__(self, acceleration, bodies=None, name: str | None = None):
        super().__init__(name)
        owner = f"UniformGravity {self.name!r}"
        self.acceleration = as_vector(acceleration, 3, "acceleration", owner)
        self._bodies = _check_bodies(bodies, owner)


    def terms(self, context):
        g = np.linalg.norm(self.acceleration)
        if g == 0.0:
            return []
        direction = self.acceleration / g
        out = []
        for body in self.bodies_acted_on():
            position = context.point(body, body.reference_point())
            invariant = dot(position, AffineVector((), direction))
            out.append(TermInstance(UniformGravityTerm, [invariant],
                                    {"weight": body.mass * g}))
        return out


class CentralPointTerm(InvariantTerm):
    """V = -mu m / sqrt(pi), pi = |x - c|^2."""

    n_invariants = 1

    @classmethod
    def energy(cls, pi, params):
        return -params["mu_m"] / np.sqrt(pi[:, 0])

    @classmethod
    def gradient(cls, pi, params):
        return (0.5 * params["mu_m"] * pi[:, 0] ** -1.5)[:, None]

    @classmethod
    def hessian(cls, pi, params):
        return (-0.75 * params["mu_m"] * pi[:, 0] ** -2.5)[:, None, None]

    @classmethod
    def singular_distance(cls, pi, params):
        return np.sqrt(np.abs(pi[:, 0]))

    @classmethod
    def singular_travel(cls, pi0, pi_mid, pi1, params):
        """|d1 - d0| of the relative position d (affine in q, so d(q_mid) = (d0 + d1) / 2)
        from the squared distances: |d1 - d0|^2 = 2 |d0|^2 + 2 |d1|^2 - 4 |d_mid|^2."""
        return np.sqrt(np.maximum(2.0 * pi0[:, 0] + 2.0 * pi1[:, 0] - 4.0 * pi_mid[:, 0],
                                  0.0))


class CentralGradientTerm(InvariantTerm):
    """Gravity gradient of a rigid body: the part of its central-gravity potential beyond the
    point-mass term (:class:`CentralPointTerm`),

    V = -mu / (2 r^3) sum_ij E_ij (3 (n.d_i)(n.d_j) - delta_ij), n = (phi - c)/r,

    written through pi_0 = |phi - c|^2 and a_i = (phi - c) . d_i (both invariant under
    rotations about c): V~ = -3/2 mu (a.E a) pi_0^-5/2 + 1/2 mu tr(E) pi_0^-3/2.

    It is a term of its own because it is smaller than the point-mass term by (body size /
    r)^2, 1e-15 for a spacecraft in Earth orbit: in one discrete gradient with the point-mass
    term, the round-off of that term's energy difference would outweigh it.
    """

    n_invariants = 4

    @classmethod
    def energy(cls, pi, params):
        mu, euler = params["mu"], params["euler"]
        r2, a = pi[:, 0], pi[:, 1:]
        quad = np.einsum("ei,eij,ej->e", a, euler, a)
        trace = np.trace(euler, axis1=1, axis2=2)
        return -1.5 * mu * quad * r2**-2.5 + 0.5 * mu * trace * r2**-1.5

    @classmethod
    def energy_scale(cls, pi, params):
        # the two terms nearly cancel for a body of nearly equal moments
        mu, euler = params["mu"], params["euler"]
        r2, a = pi[:, 0], pi[:, 1:]
        quad = np.einsum("ei,eij,ej->e", a, euler, a)
        trace = np.trace(euler, axis1=1, axis2=2)
        return np.abs(1.5 * mu * quad * r2**-2.5) + np.abs(0.5 * mu * trace * r2**-1.5)

    @classmethod
    def gradient(cls, pi, params):
        mu, euler = params["mu"], params["euler"]
        r2, a = pi[:, 0], pi[:, 1:]
        ea = np.einsum("eij,ej->ei", euler, a)
        quad = np.sum(a * ea, axis=1)
        trace = np.trace(euler, axis1=1, axis2=2)
        d_r2 = 3.75 * mu * quad * r2**-3.5 - 0.75 * mu * trace * r2**-2.5
        d_a = -3.0 * (mu * r2**-2.5)[:, None] * ea
        return np.column_stack([d_r2, d_a])

    @classmethod
    def hessian(cls, pi, params):
        mu, euler = params["mu"], params["euler"]
        r2, a = pi[:, 0], pi[:, 1:]
        ea = np.einsum("eij,ej->ei", euler, a)
        quad = np.sum(a * ea, axis=1)
        trace = np.trace(euler, axis1=1, axis2=2)
        out = np.zeros((pi.shape[0], 4, 4))
        out[:, 0, 0] = -13.125 * mu * quad * r2**-4.5 + 1.875 * mu * trace * r2**-3.5
        cross = 7.5 * (mu * r2**-3.5)[:, None] * ea
        out[:, 0, 1:] = cross
        out[:, 1:, 0] = cross
        out[:, 1:, 1:] = -3.0 * (mu * r2**-2.5)[:, None, None] * euler
        return out

    @classmethod
    def invariant_scales(cls, pi0, params):
        r = np.sqrt(np.abs(pi0[:, 0]))
        return np.column_stack([pi0[:, 0], r, r, r])


class CentralGravity(FieldForce):
    """Newtonian gravity of a point mass at ``center``: V = -mu m / |phi - c| per body.

    For rigid bodies the gravity-gradient term -mu/(2 r^3) sum_i E_i (3 (n.d_i)^2 - 1) is
    included (satellite attitude dynamics) unless ``gravity_gradient=False``.

    Parameters
    ----------
    mu : float
        Gravitational parameter G M (positive).
    center : array_like (3,)
        Attracting centre (fixed in the world).
    bodies : list of Body, optional
        Bodies attracted; None means every body of the system.
    gravity_gradient : bool
        Include the second-order (tidal) term for rigid bodies.
    name : str, optional
        Unique in the system; by default ``force<k>`` with the first k not taken.
    """

    def __init__(self, mu: float, center=(0.0, 0.0, 0.0), bodies=None,
                 gravity_gradient: bool = True, name: str | None = None):
        super().__init__(name)
        owner = f"CentralGravity {self.name!r}"
        self.mu = as_scalar(mu, "mu", owner, positive=True)
        self.center = as_vector(center, 3, "center", owner)
        self._bodies = _check_bodies(bodies, owner)
        self.gravity_gradient = bool(gravity_gradient)


    def terms(self, context):
        out = []
        center = AffineVector((), self.center)
        for body in self.bodies_acted_on():
            position = context.point(body, body.reference_point())
            relative = position - center
            if np.linalg.norm(body.reference_point() - self.center) == 0.0:
                raise ModelError(f"CentralGravity {self.name!r}: body {body.name!r} starts at "
                                 f"the attracting centre, where the potential is singular")
            out.append(TermInstance(CentralPointTerm, [squared_distance(relative)],
                                    {"mu_m": self.mu * body.mass}))
            if body.n_coordinates == 12 and self.gravity_gradient:
                invariants = [squared_distance(relative)] + [
                    dot(relative, body.director_expression(i, context.offsets[body.name]))
                    for i in range(3)]
                out.append(TermInstance(CentralGradientTerm, invariants, {
                    "mu": self.mu, "euler": body.euler_tensor}))
        return out


def _check_bodies(bodies, owner: str) -> list | None:
    """None (every body) or a list of distinct bodies that have coordinates."""
    if bodies is None:
        return None
    try:
        bodies = list(bodies)
    except TypeError:
        raise ModelTypeError(f"{owner}: bodies must be a list of bodies or None, got "
                             f"{bodies!r}") from None
    for body in bodies:
        if not isinstance(body, Body):
            raise ModelTypeError(f"{owner}: {body!r} is not a body")
        if body.n_coordinates == 0:
            raise ModelError(f"{owner}: the ground cannot be attracted; list moving bodies")
    if len({id(b) for b in bodies}) != len(bodies):
        raise ModelError(f"{owner}: a body is listed twice")
    return bodies


__all__ = ["CentralGravity", "UniformGravity", "Invariant"]
