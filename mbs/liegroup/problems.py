"""Hamiltonian problems on T*G = G x g* for the Lie group integrators, and the groups they use.

The integrators of G. Bogfjellmo and H. Marthinsen, "High order symplectic partitioned Lie group
methods" (preprint, 2014) need from a problem only the right-trivialised Hamiltonian vector field
of eq. (5),

    f(q, mu) = (xi, n) = ( D_2 H(q, mu), -(D_1 H(q, mu)) . q^{-1} ),
    q' = xi . q,   mu' = n - ad*_xi mu,

plus the operations of the group G listed in :class:`LieGroup`. :class:`Problem` states this
interface; :class:`RigidBodyProblem` builds it for a rigid body on SO(3) from three pieces a
compiled multibody model can supply directly: the body inertia J (about the fixed point, or the
centre of mass for a free body), the potential V(g) and its left-trivialised gradient (the
negative body-frame torque). For a body with Hamiltonian H(g, mu) = mu^T g J^{-1} g^T mu / 2 + V(g)
and mu the spatial angular momentum:

    xi = g J^{-1} g^T mu                (spatial angular velocity)
    n  = mu x xi - g grad^L V(g)        (grad^L V the left-trivialised gradient)

so that mu' = n - mu x xi = -g grad^L V(g) is the spatial external torque. For a potential made
of point potentials phi_k acting at material points Y_k (body frame),
V(g) = sum_k phi_k(g Y_k), the left-trivialised gradient is
grad^L V(g) = sum_k Y_k x (g^T grad phi_k(g Y_k)).

Link to the director formulation. With the directors d_k as the columns of g (body axes =
principal axes), a potential V(d_1, d_2, d_3) with Euclidean gradients dV/dd_k, as a compiled
director model evaluates it, has grad^R V = sum_k d_k x dV/dd_k (because
g exp(e eta) e_k = d_k + e (g eta) x d_k), hence grad^L V = g^T sum_k d_k x dV/dd_k
(:class:`DirectorPotentialBody`). The momenta map as mu = sum_k d_k x p_k with p_k = E_kl d_l'
(Euler tensor E = tr(J)/2 I - J), which equals g J g^T omega for consistent states; conversely
omega = g J^{-1} g^T mu and d_k' = omega x d_k (:func:`director_state`, :func:`lie_state`).

All functions accept stacked states (leading axes), which the stage-equation solvers use to
evaluate all stages and all finite-difference columns of a Jacobian in one call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

from mbs.liegroup import so3

# ----------------------------------------------------------------------------------------------
# Groups
# ----------------------------------------------------------------------------------------------


@runtime_checkable
class LieGroup(Protocol):
    """Operations of a matrix-free Lie group G with algebra g = R^dim and g* = R^dim.

    Group elements and points are the same objects (G acts on itself by left multiplication).
    Every method works on stacked arguments; "(...)" below means any leading axes.
    """

    dim: int
    #: Shape of one group element, e.g. (3, 3) for SO(3) or (3,) for R^3.
    element_shape: tuple[int, ...]

    def identity(self) -> np.ndarray:
        """The identity element."""

    def exp(self, x: np.ndarray) -> np.ndarray:
        """exp: g (..., dim) -> G (..., *element_shape)."""

    def multiply(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The product a b."""

    def coadjoint(self, g: np.ndarray) -> np.ndarray:
        """Matrix (..., dim, dim) of Ad*_g (so Ad*_g mu = coadjoint(g) @ mu)."""

    def coadjoint_inverse(self, g: np.ndarray) -> np.ndarray:
        """Matrix of Ad*_{g^{-1}}."""

    def dexp(self, x: np.ndarray) -> np.ndarray:
        """Matrix of the right-trivialised dexp_x; dexp*_x is its transpose."""

    def dexp_inv_series(self, x: np.ndarray, r: int) -> np.ndarray:
        """Matrix of dexp^{-1}_{(r), x} = sum_{k=0}^{r} (B_k/k!) ad_x^k."""

    def dexp_inv_series_derivative(self, x: np.ndarray, xi: np.ndarray, r: int) -> np.ndarray:
        """Matrix D_(r)(x, xi) = d/dx [dexp^{-1}_{(r), x} xi]; P*_(r)(x, xi) is its transpose."""


class SO3Group:
    """SO(3) with so(3) = R^3 (hat map) and so(3)* = R^3: Ad*_g mu = g^T mu."""

    dim = 3
    element_shape = (3, 3)

    def identity(self) -> np.ndarray:
        return np.eye(3)

    def exp(self, x: np.ndarray) -> np.ndarray:
        return so3.exp(x)

    def multiply(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a @ b

    def coadjoint(self, g: np.ndarray) -> np.ndarray:
        return np.swapaxes(g, -1, -2)

    def coadjoint_inverse(self, g: np.ndarray) -> np.ndarray:
        return g

    def dexp(self, x: np.ndarray) -> np.ndarray:
        return so3.dexp(x)

    def dexp_inv_series(self, x: np.ndarray, r: int) -> np.ndarray:
        return so3.dexp_inv_series(x, r)

    def dexp_inv_series_derivative(self, x: np.ndarray, xi: np.ndarray, r: int) -> np.ndarray:
        return so3.dexp_inv_series_derivative(x, xi, r)


class TranslationGroup:
    """The abelian group R^dim under addition: exp(x) = x, Ad* = dexp = dexp^{-1} = I, D = 0.

    On it every VRKMK and VCG method reduces to a symplectic partitioned Runge-Kutta method
    (paper, sections 4.1 and 4.2), which the tests use as an exact cross-check.
    """

    def __init__(self, dim: int = 3):
        self.dim = dim
        self.element_shape = (dim,)

    def identity(self) -> np.ndarray:
        return np.zeros(self.dim)

    def exp(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=float)

    def multiply(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a + b

    def _eye(self, leading: tuple[int, ...]) -> np.ndarray:
        return np.broadcast_to(np.eye(self.dim), leading + (self.dim, self.dim))

    def coadjoint(self, g: np.ndarray) -> np.ndarray:
        return self._eye(np.shape(g)[:-1])

    def coadjoint_inverse(self, g: np.ndarray) -> np.ndarray:
        return self._eye(np.shape(g)[:-1])

    def dexp(self, x: np.ndarray) -> np.ndarray:
        return self._eye(np.shape(x)[:-1])

    def dexp_inv_series(self, x: np.ndarray, r: int) -> np.ndarray:
        return self._eye(np.shape(x)[:-1])

    def dexp_inv_series_derivative(self, x: np.ndarray, xi: np.ndarray, r: int) -> np.ndarray:
        shape = np.broadcast_shapes(np.shape(x), np.shape(xi))
        return np.zeros(shape + (self.dim,))


# ----------------------------------------------------------------------------------------------
# Problem interface
# ----------------------------------------------------------------------------------------------


@runtime_checkable
class Problem(Protocol):
    """A Hamiltonian system on T*G in the right-trivialised form used by VRKMK and VCG.

    ``q`` has shape (..., *group.element_shape) and ``mu`` shape (..., group.dim).
    """

    group: LieGroup

    def vector_field(self, q: np.ndarray, mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(xi, n) = f(q, mu) of eq. (5): xi = D_2 H, n = -(D_1 H) . q^{-1}."""

    def energy(self, q: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """The Hamiltonian H(q, mu), shape (...)."""

    def momentum(self, q: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """The momentum map of left translations (mu itself for right trivialisation)."""

    def initial_state(self) -> tuple[np.ndarray, np.ndarray]:
        """The problem's initial data (q0, mu0)."""


class RigidBodyProblem:
    """A rigid body on SO(3) with H(g, mu) = mu^T g J^{-1} g^T mu / 2 + V(g) (module docstring).

    Subclasses set :attr:`inertia`, the initial state, and implement :meth:`potential` and
    :meth:`potential_gradient`. State: g (..., 3, 3) rotation (columns = body axes in space, the
    directors of the director formulation) and mu (..., 3) spatial angular momentum.

    Attributes
    ----------
    inertia : ndarray, shape (3, 3)
        Symmetric positive definite body-frame inertia J.
    conserved_components : tuple of int
        Components of the spatial momentum mu conserved by the dynamics (from symmetries of V
        under left rotations), hence by the variational integrators (discrete Noether).
    """

    group: LieGroup = SO3Group()
    conserved_components: tuple[int, ...] = ()

    def __init__(self, inertia: np.ndarray, g0: np.ndarray, mu0: np.ndarray):
        self.inertia = np.array(inertia, dtype=float)
        if self.inertia.shape == (3,):
            self.inertia = np.diag(self.inertia)
        self.inverse_inertia = np.linalg.inv(self.inertia)
        self.g0 = np.array(g0, dtype=float)
        self.mu0 = np.array(mu0, dtype=float)

    # -- to be provided by a concrete problem (or a compiled model) ----------------------------

    def potential(self, g: np.ndarray) -> np.ndarray:
        """V(g), shape (...)."""
        raise NotImplementedError

    def potential_gradient(self, g: np.ndarray) -> np.ndarray:
        """Left-trivialised gradient: <grad^L V(g), eta> = d/de V(g exp(e eta)) at e = 0."""
        raise NotImplementedError

    # -- derived -----------------------------------------------------------------------------

    def initial_state(self) -> tuple[np.ndarray, np.ndarray]:
        return self.g0.copy(), self.mu0.copy()

    def angular_velocity(self, g: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """Spatial angular velocity xi = g J^{-1} g^T mu."""
        body = self.body_angular_velocity(g, mu)
        return np.einsum("...ij,...j->...i", g, body)

    def body_angular_velocity(self, g: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """Body angular velocity Omega = J^{-1} g^T mu."""
        return self.body_momentum(g, mu) @ self.inverse_inertia.T

    def body_momentum(self, g: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """Body angular momentum Pi = g^T mu."""
        return np.einsum("...ji,...j->...i", g, mu)

    def spatial_torque(self, g: np.ndarray) -> np.ndarray:
        """tau = -g grad^L V(g), the right-trivialised force of the potential."""
        return -np.einsum("...ij,...j->...i", g, self.potential_gradient(g))

    def vector_field(self, g: np.ndarray, mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xi = self.angular_velocity(g, mu)
        return xi, so3.cross(mu, xi) + self.spatial_torque(g)

    def energy(self, g: np.ndarray, mu: np.ndarray) -> np.ndarray:
        xi = self.angular_velocity(g, mu)
        return 0.5 * np.einsum("...i,...i->...", mu, xi) + self.potential(g)

    def momentum(self, g: np.ndarray, mu: np.ndarray) -> np.ndarray:
        return np.asarray(mu, dtype=float).copy()


_E3 = np.array([0.0, 0.0, 1.0])


def _point_potential_gradient(g: np.ndarray, points: np.ndarray,
                              spatial_gradients: np.ndarray) -> np.ndarray:
    """sum_k Y_k x (g^T grad phi_k): points (k, 3) body frame, spatial_gradients (..., k, 3)."""
    body_gradients = spatial_gradients @ g
    return so3.cross(points, body_gradients).sum(axis=-2)


class DipoleOnStick(RigidBodyProblem):
    """The paper's test problem ("dipole on a stick", section 6, Fig. 1), chaotic on SO(3).

    A massless rod of length 1 pivots at the origin; at its end a massless rod of length
    2 alpha carries two particles of mass m/2 and charges +-q at Y_+- = (0, +-alpha, -1) (body
    frame). Gravity (constant 1) acts along -e3 and a fixed charge beta sits at z = (0, 0, -3/2):

        V(g) = s m e3^T g e3 + q beta (1/|g Y_+ - z| - 1/|g Y_- - z|),
        J = m diag(1 + alpha^2, 1, alpha^2) (inertia about the pivot).

    The paper prints s = +1, but the centre of mass is at -g e3, so gravity along -e3 gives
    s = -1; only s = -1 reproduces the energy-error levels of the paper's Fig. 3. ``gravity_sign``
    selects s (default -1). Initial data: g(0) = rotation by +90 degrees about e1,
    mu(0) = g(0) J g(0)^T e2 (unit spatial angular velocity about e2), so H(0) =
    -0.04623925371591653 for either sign. V is invariant under rotations about e3, so mu_3 is
    conserved.
    """

    conserved_components = (2,)

    def __init__(self, m: float = 1.0, charge: float = 1.0, beta: float = 1.0,
                 alpha: float = 0.1, gravity_sign: float = -1.0):
        g0 = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
        inertia = m * np.diag([1.0 + alpha**2, 1.0, alpha**2])
        super().__init__(inertia, g0, g0 @ inertia @ g0.T @ np.array([0.0, 1.0, 0.0]))
        self.m = m
        self.charge_strength = charge * beta
        self.gravity_sign = float(gravity_sign)
        self.charges = np.array([[0.0, alpha, -1.0], [0.0, -alpha, -1.0]])
        self.charge_signs = np.array([1.0, -1.0])
        self.fixed_charge = np.array([0.0, 0.0, -1.5])

    def potential(self, g: np.ndarray) -> np.ndarray:
        g = np.asarray(g, dtype=float)
        offsets = np.swapaxes(g @ self.charges.T, -1, -2) - self.fixed_charge
        distances = np.sqrt(np.sum(offsets * offsets, axis=-1))
        coulomb = self.charge_strength * np.sum(self.charge_signs / distances, axis=-1)
        return self.gravity_sign * self.m * g[..., 2, 2] + coulomb

    def potential_gradient(self, g: np.ndarray) -> np.ndarray:
        g = np.asarray(g, dtype=float)
        offsets = np.swapaxes(g @ self.charges.T, -1, -2) - self.fixed_charge
        distances = np.sqrt(np.sum(offsets * offsets, axis=-1))
        # grad of +-q beta/|y - z| is -+q beta (y - z)/|y - z|^3.
        coulomb = -(self.charge_strength * self.charge_signs / distances**3)[..., None] * offsets
        # Gravity s m e3^T g e3 is the point potential m e3 . y at the material point Y = s e3.
        gravity = self.gravity_sign * self.m * so3.cross(_E3, g[..., 2, :])
        return _point_potential_gradient(g, self.charges, coulomb) + gravity


class FreeRigidBody(RigidBodyProblem):
    """Torque-free rigid body (V = 0): the whole spatial momentum mu is conserved.

    Defaults: J = diag(2, 3, 4), g(0) = I, body angular velocity Omega(0) = (1, 0, 1), hence
    mu(0) = J Omega(0) = (2, 0, 4).
    """

    conserved_components = (0, 1, 2)

    def __init__(self, inertia=(2.0, 3.0, 4.0), g0: np.ndarray | None = None,
                 omega0=(1.0, 0.0, 1.0)):
        g0 = np.eye(3) if g0 is None else np.asarray(g0, dtype=float)
        inertia_matrix = np.diag(inertia) if np.ndim(inertia) == 1 else np.asarray(inertia)
        super().__init__(inertia_matrix, g0, g0 @ inertia_matrix @ np.asarray(omega0, float))

    def potential(self, g: np.ndarray) -> np.ndarray:
        return np.zeros(np.shape(g)[:-2])

    def potential_gradient(self, g: np.ndarray) -> np.ndarray:
        return np.zeros(np.shape(g)[:-1])


class HeavyTop(RigidBodyProblem):
    """Heavy (Lagrange) top about a fixed pivot: V(g) = mgl e3 . (g chi).

    Defaults: J = diag(1, 1, 0.5) about the pivot, mgl = 1, chi = e3, g(0) = rotation by 0.3 rad
    about e1, Omega(0) = (0, 0.2, 5). Both mu_3 and, for J_1 = J_2 and chi = e3, the body
    component Pi_3 = e3 . g^T mu are conserved.
    """

    conserved_components = (2,)

    def __init__(self, inertia=(1.0, 1.0, 0.5), mgl: float = 1.0, chi=(0.0, 0.0, 1.0),
                 g0: np.ndarray | None = None, omega0=(0.0, 0.2, 5.0)):
        g0 = so3.exp(np.array([0.3, 0.0, 0.0])) if g0 is None else np.asarray(g0, dtype=float)
        inertia_matrix = np.diag(inertia)
        super().__init__(inertia_matrix, g0, g0 @ inertia_matrix @ np.asarray(omega0, float))
        self.mgl = mgl
        self.chi = np.asarray(chi, dtype=float)

    def potential(self, g: np.ndarray) -> np.ndarray:
        return self.mgl * np.einsum("...j,j->...", np.asarray(g)[..., 2, :], self.chi)

    def potential_gradient(self, g: np.ndarray) -> np.ndarray:
        # Point potential mgl e3 . y at Y = chi: chi x (g^T mgl e3), and g^T e3 is row 3 of g.
        return self.mgl * so3.cross(self.chi, np.asarray(g, dtype=float)[..., 2, :])


class DirectorPotentialBody(RigidBodyProblem):
    """A rigid body whose potential is given on the directors, as a director model provides it.

    Parameters
    ----------
    inertia : array_like
        Body inertia J (3 principal moments or a 3x3 matrix) about the fixed point.
    potential : callable
        V(directors) for stacked director matrices (..., 3, 3) whose columns are d_1, d_2, d_3.
    director_gradient : callable
        The Euclidean gradient, (..., 3, 3) with column k = dV/dd_k.
    g0, mu0 : array_like
        Initial rotation and spatial angular momentum.
    conserved_components : tuple of int, optional
        Components of mu conserved by the symmetry of V (metadata only).
    """

    def __init__(self, inertia, potential: Callable[[np.ndarray], np.ndarray],
                 director_gradient: Callable[[np.ndarray], np.ndarray], g0, mu0,
                 conserved_components: tuple[int, ...] = ()):
        super().__init__(inertia, g0, mu0)
        self._potential = potential
        self._director_gradient = director_gradient
        self.conserved_components = conserved_components

    def potential(self, g: np.ndarray) -> np.ndarray:
        return self._potential(np.asarray(g, dtype=float))

    def potential_gradient(self, g: np.ndarray) -> np.ndarray:
        g = np.asarray(g, dtype=float)
        gradient = np.swapaxes(self._director_gradient(g), -1, -2)      # rows dV/dd_k
        spatial = so3.cross(np.swapaxes(g, -1, -2), gradient).sum(axis=-2)
        return np.einsum("...ji,...j->...i", g, spatial)


def euler_tensor(inertia: np.ndarray) -> np.ndarray:
    """Euler tensor E = tr(J)/2 I - J of the director formulation (J = E_2 + E_3, cyclic)."""
    inertia = np.asarray(inertia, dtype=float)
    inertia = np.diag(inertia) if inertia.shape == (3,) else inertia
    return 0.5 * np.trace(inertia) * np.eye(3) - inertia


def director_state(g: np.ndarray, mu: np.ndarray, inertia: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Director velocities and momenta of the state (g, mu).

    Returns ``(velocities, momenta)``, both (..., 3, 3) with column k = d_k' = omega x d_k and
    p_k = sum_l E_kl d_l' respectively, where omega = g J^{-1} g^T mu; the directors are g.
    """
    inertia = np.asarray(inertia, dtype=float)
    inertia = np.diag(inertia) if inertia.shape == (3,) else inertia
    g = np.asarray(g, dtype=float)
    omega = g @ np.linalg.solve(inertia, np.swapaxes(g, -1, -2) @ np.asarray(mu)[..., None])
    velocities = so3.hat(omega[..., 0]) @ g
    return velocities, velocities @ euler_tensor(inertia).T


def lie_state(directors: np.ndarray, momenta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(g, mu) from directors (columns d_k) and director momenta (columns p_k):
    g = [d_1 d_2 d_3] and mu = sum_k d_k x p_k."""
    directors = np.asarray(directors, dtype=float)
    momenta = np.asarray(momenta, dtype=float)
    mu = so3.cross(np.swapaxes(directors, -1, -2), np.swapaxes(momenta, -1, -2)).sum(axis=-2)
    return directors.copy(), mu


class PointMassProblem:
    """A point mass on the abelian group R^3: H(x, p) = |p|^2/(2 m) + V(x), f = (p/m, -grad V).

    It is the R^3 factor of a rigid body with translation (G = SO(3) x R^3), and an exact check:
    VRKMK and VCG on an abelian group are symplectic partitioned Runge-Kutta methods (paper,
    section 4).

    Parameters
    ----------
    mass : float
    potential, gradient : callable
        V(x) and grad V(x) for stacked positions x (..., 3).
    x0, p0 : array_like, shape (3,)
    """

    group: LieGroup = TranslationGroup(3)
    conserved_components: tuple[int, ...] = ()

    def __init__(self, mass: float, potential: Callable[[np.ndarray], np.ndarray],
                 gradient: Callable[[np.ndarray], np.ndarray], x0, p0):
        self.mass = float(mass)
        self.potential = potential
        self.gradient = gradient
        self.x0 = np.asarray(x0, dtype=float)
        self.p0 = np.asarray(p0, dtype=float)

    def initial_state(self) -> tuple[np.ndarray, np.ndarray]:
        return self.x0.copy(), self.p0.copy()

    def vector_field(self, x: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(p) / self.mass, -self.gradient(x)

    def energy(self, x: np.ndarray, p: np.ndarray) -> np.ndarray:
        return 0.5 * np.einsum("...i,...i->...", p, p) / self.mass + self.potential(x)

    def momentum(self, x: np.ndarray, p: np.ndarray) -> np.ndarray:
        return np.asarray(p, dtype=float).copy()
