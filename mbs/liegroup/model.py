"""Lie-group model of an :class:`mbs.System`: rigid bodies on SO(3) x R^3.

``system.compile(formulation="lie-group")`` returns a :class:`LieGroupModel`: the Hamiltonian
system on T*G, G = SO(3)^R x (R^3)^T, that the variational Lie group integrators of
G. Bogfjellmo and H. Marthinsen, "High order symplectic partitioned Lie group methods"
(preprint, 2014) advance in the right-trivialised form of their eq. (5),

    q' = xi . q,   mu' = n - ad*_xi mu,   (xi, n) = (D_2 H, -(D_1 H) . q^{-1}).

Configuration space (a product group, on which every operator of the methods is
block-diagonal):

* a **free rigid body** has a rotation block R in SO(3) (columns = the directors d_1, d_2,
  d_3 of the director formulation) with its spatial angular momentum mu about the centre of
  mass, and a translation block x in R^3 (the centre of mass) with its linear momentum p;
* a rigid body **pivoted to the ground by a spherical joint** has only the rotation block; mu
  is its spatial angular momentum about the pivot P, the inertia is taken about P
  (J_P = J + m (|X|^2 I - X X^T), X the pivot in the body frame relative to the centre of
  mass), and the centre of mass is phi = P - R X;
* a **point mass** has a translation block.

Per rotation block H contributes mu^T R J^{-1} R^T mu / 2, so xi = R J^{-1} R^T mu (the spatial
angular velocity) and n = mu x xi + tau with the spatial torque tau; per translation block
|p|^2/(2 m), xi = p/m and n = F.

The potential is the director model's (every potential of mbs: uniform and central gravity with
its gravity-gradient torque, springs, user potentials): the state (R, x) is mapped to the
director coordinates q = (phi, d_1, d_2, d_3) of every body and V(q), grad V(q) are evaluated by
the compiled :class:`mbs.Model` for all stacked configurations at once. The right-trivialised
gradients follow by the chain rule: rotating R -> exp(e eta) R about the centre of mass moves
d_k by e eta x d_k, so <grad^R V, eta> = eta . sum_k d_k x dV/dd_k and
tau = -sum_k d_k x dV/dd_k; about a pivot phi moves too (phi - P -> exp(e eta)(phi - P)), which
adds -(phi - P) x dV/dphi; on a translation block F = -dV/dphi.

States convert both ways (:func:`lie_group_to_director`, :func:`director_to_lie_group`): with
the Euler tensor E = tr(J)/2 I - J of the director mass matrix, p_{d_k} = sum_l E_kl d_l',
d_l' = omega x d_l, omega = R J^{-1} R^T mu; conversely mu = sum_k d_k x p_{d_k} (about the
centre of mass) plus (phi - P) x p_phi about a pivot.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbs.bodies.point_mass import PointMass
from mbs.bodies.rigid_body import RigidBody
from mbs.errors import ModelError, warn_user
from mbs.liegroup import so3
from mbs.model import Model

#: Names accepted by ``System.compile(formulation=...)``.
FORMULATIONS = ("director", "lie-group")


# ----------------------------------------------------------------------------------------------
# The product group SO(3)^R x (R^3)^T
# ----------------------------------------------------------------------------------------------


class ProductGroup:
    """G = SO(3)^R x (R^3)^T with flat elements and block-diagonal operators.

    An element is a vector of length 9 R + 3 T: the R rotation matrices (row-major), then the
    T translations. The algebra and its dual are R^(3R + 3T), rotation components first. Every
    operator of :class:`mbs.liegroup.problems.LieGroup` is block-diagonal: the SO(3) blocks of
    :mod:`mbs.liegroup.so3` for rotations and the identity (exp, Ad*, dexp, dexp^{-1}) or zero
    (D_(r)) for translations (paper, section 4: on an abelian factor VRKMK and VCG are
    partitioned Runge-Kutta methods). All blocks are evaluated in one stacked call.
    """

    def __init__(self, rotations: int, translations: int):
        self.rotations = int(rotations)
        self.translations = int(translations)
        self.dim = 3 * (self.rotations + self.translations)
        self.element_shape = (9 * self.rotations + 3 * self.translations,)
        blocks = np.arange(self.rotations)
        local_row, local_col = np.divmod(np.arange(9), 3)
        self._block_rows = (3 * blocks[:, None] + local_row).ravel()
        self._block_cols = (3 * blocks[:, None] + local_col).ravel()
        self._translation_diagonal = np.arange(3 * self.rotations, self.dim)
        self._single_rotation = self.rotations == 1 and self.translations == 0

    # -- splitting ---------------------------------------------------------------------------
    def _rotations_of(self, g: np.ndarray) -> np.ndarray:
        return g[..., :9 * self.rotations].reshape(g.shape[:-1] + (self.rotations, 3, 3))

    def _vectors_of(self, x: np.ndarray) -> np.ndarray:
        return x[..., :3 * self.rotations].reshape(x.shape[:-1] + (self.rotations, 3))

    def _join(self, rotations: np.ndarray, translations: np.ndarray) -> np.ndarray:
        leading = rotations.shape[:-3]
        flat = rotations.reshape(leading + (9 * self.rotations,))
        if not self.translations:
            return flat
        return np.concatenate([flat, np.broadcast_to(translations, leading
                                                     + translations.shape[-1:])], axis=-1)

    def _block_diagonal(self, blocks: np.ndarray, translation_value: float) -> np.ndarray:
        """(..., dim, dim) with the rotation blocks (..., R, 3, 3) on the diagonal and
        ``translation_value`` times the identity on the translation part."""
        if self._single_rotation:
            return blocks[..., 0, :, :]
        leading = blocks.shape[:-3]
        out = np.zeros(leading + (self.dim, self.dim))
        out[..., self._block_rows, self._block_cols] = blocks.reshape(
            leading + (9 * self.rotations,))
        if translation_value:
            out[..., self._translation_diagonal, self._translation_diagonal] = translation_value
        return out

    # -- LieGroup interface ------------------------------------------------------------------
    def identity(self) -> np.ndarray:
        return np.concatenate([np.tile(np.eye(3).ravel(), self.rotations),
                               np.zeros(3 * self.translations)])

    # A single rotation block (a pivoted body alone) is SO(3) itself: the algebra vectors are
    # those of :mod:`mbs.liegroup.so3` and only the elements are flattened.
    def exp(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        if self._single_rotation:
            return so3.exp(x).reshape(x.shape[:-1] + (9,))
        return self._join(so3.exp(self._vectors_of(x)), x[..., 3 * self.rotations:])

    def multiply(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if self._single_rotation:
            product = a.reshape(a.shape[:-1] + (3, 3)) @ b.reshape(b.shape[:-1] + (3, 3))
            return product.reshape(product.shape[:-2] + (9,))
        rotations = self._rotations_of(a) @ self._rotations_of(b)
        return self._join(rotations, a[..., 9 * self.rotations:] + b[..., 9 * self.rotations:])

    def coadjoint(self, g: np.ndarray) -> np.ndarray:
        """Ad*_g: R^T on rotation blocks, I on translations."""
        if self._single_rotation:
            return np.swapaxes(g.reshape(g.shape[:-1] + (3, 3)), -1, -2)
        return self._block_diagonal(np.swapaxes(self._rotations_of(g), -1, -2), 1.0)

    def coadjoint_inverse(self, g: np.ndarray) -> np.ndarray:
        if self._single_rotation:
            return g.reshape(g.shape[:-1] + (3, 3))
        return self._block_diagonal(self._rotations_of(g), 1.0)

    def dexp(self, x: np.ndarray) -> np.ndarray:
        if self._single_rotation:
            return so3.dexp(x)
        return self._block_diagonal(so3.dexp(self._vectors_of(np.asarray(x, float))), 1.0)

    def dexp_inv_series(self, x: np.ndarray, r: int) -> np.ndarray:
        if self._single_rotation:
            return so3.dexp_inv_series(x, r)
        return self._block_diagonal(so3.dexp_inv_series(self._vectors_of(np.asarray(x, float)),
                                                        r), 1.0)

    def dexp_inv_series_derivative(self, x: np.ndarray, xi: np.ndarray, r: int) -> np.ndarray:
        if self._single_rotation:
            return so3.dexp_inv_series_derivative(x, xi, r)
        x = np.asarray(x, dtype=float)
        xi = np.asarray(xi, dtype=float)
        shape = np.broadcast_shapes(x.shape, xi.shape)
        blocks = so3.dexp_inv_series_derivative(
            self._vectors_of(np.broadcast_to(x, shape)),
            self._vectors_of(np.broadcast_to(xi, shape)), r)
        return self._block_diagonal(blocks, 0.0)


# ----------------------------------------------------------------------------------------------
# State
# ----------------------------------------------------------------------------------------------


@dataclass
class LieGroupState:
    """State of a :class:`LieGroupModel` (any leading axes, e.g. time for a trajectory).

    Attributes
    ----------
    rotation : ndarray, shape (..., R, 3, 3)
        Rotation of every rotating body (:attr:`LieGroupModel.rotating_bodies`); columns are
        the body axes in the world frame (the directors d_1, d_2, d_3).
    angular_momentum : ndarray, shape (..., R, 3)
        Spatial angular momentum mu (world frame), about the centre of mass of a free body or
        about the pivot of a pivoted one.
    position : ndarray, shape (..., T, 3)
        Centre of mass of every free rigid body and position of every point mass
        (:attr:`LieGroupModel.translating_bodies`).
    linear_momentum : ndarray, shape (..., T, 3)
    """

    rotation: np.ndarray
    angular_momentum: np.ndarray
    position: np.ndarray
    linear_momentum: np.ndarray


# ----------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------


class LieGroupModel:
    """A System on T*(SO(3)^R x (R^3)^T) for the Lie group integrators (module docstring).

    Built by ``system.compile(formulation="lie-group")``. It satisfies the problem interface of
    :mod:`mbs.liegroup.problems` on flat arrays (``group``, ``vector_field``, ``energy``,
    ``momentum``, ``initial_state``), so :func:`mbs.liegroup.integrate` and the
    :class:`~mbs.liegroup.VRKMK` / :class:`~mbs.liegroup.VCG` steps run on it directly;
    :func:`mbs.simulate` runs it and returns the :class:`mbs.Solution` of
    :attr:`director_model`.

    Attributes
    ----------
    director_model : Model
        The director-formulation model of the same system; its potential is the one used here
        and its :class:`mbs.Solution` is what runs return.
    rotating_bodies : tuple of str
        Rigid bodies, in system order; index r of the rotation blocks.
    translating_bodies : tuple of str
        Free rigid bodies (their centres of mass) and point masses, in system order.
    pivots : dict
        Body name -> world pivot point of the rigid bodies fixed by a spherical joint to the
        ground.
    inertia : ndarray, shape (R, 3, 3)
        Body-frame inertia of every rotating body about its centre of rotation (centre of mass,
        or pivot).
    masses : ndarray, shape (T,)
    group : ProductGroup
    """

    def __init__(self, director_model: Model, pivots: dict[str, tuple[np.ndarray, str]]):
        self.director_model = director_model
        rigid = [b for b in director_model.bodies if b.kind == "rigid"]
        translating = [b for b in director_model.bodies
                       if b.kind == "point" or (b.kind == "rigid" and b.name not in pivots)]
        self.rotating_bodies = tuple(b.name for b in rigid)
        self.translating_bodies = tuple(b.name for b in translating)
        self.pivots = {name: point.copy() for name, (point, _) in pivots.items()}
        self.pivot_joints = {name: joint for name, (_, joint) in pivots.items()}
        self.group = ProductGroup(len(rigid), len(translating))
        self.dim = self.group.dim
        self.masses = np.array([b.mass for b in translating], dtype=float)

        q0 = director_model.q0
        starts = np.array([b.coordinates.start for b in rigid], dtype=int)
        self._director_columns = (starts[:, None] + 3 + np.arange(9)).ravel()
        self._euler = np.array([b.euler_tensor for b in rigid]).reshape(-1, 3, 3)
        self._rigid_mass = np.array([b.mass for b in rigid], dtype=float)
        self._phi_columns = (starts[:, None] + np.arange(3)).reshape(-1, 3)
        self._translation_columns = np.concatenate(
            [np.arange(b.coordinates.start, b.coordinates.start + 3) for b in translating]
            + [np.zeros(0, dtype=int)])
        index = {name: k for k, name in enumerate(self.rotating_bodies)}
        self._pivoted = np.array([index[name] for name in self.pivots], dtype=int)
        self._pivot_points = np.array([self.pivots[name] for name in self.pivots]).reshape(-1, 3)
        self._pivot_phi_columns = self._phi_columns[self._pivoted].ravel()
        # The pivot in the body frame relative to the centre of mass, X = R0^T (P - phi0).
        offsets = []
        for k, name in zip(self._pivoted, self.pivots):
            phi0 = q0[self._phi_columns[k]]
            rotation0 = q0[self._director_columns[9 * k:9 * k + 9]].reshape(3, 3).T
            offsets.append(rotation0.T @ (self.pivots[name] - phi0))
        self._pivot_offsets = np.array(offsets).reshape(-1, 3)
        inertia = np.array([b.inertia for b in rigid]).reshape(-1, 3, 3)
        for k, offset in zip(self._pivoted, self._pivot_offsets):
            inertia[k] = inertia[k] + self._rigid_mass[k] * (
                offset @ offset * np.eye(3) - np.outer(offset, offset))
        self.inertia = inertia
        self.inverse_inertia = np.linalg.inv(inertia) if len(rigid) else inertia
        self._has_potential = bool(director_model.potential_groups)
        # V linear in q (uniform gravity): its gradient is constant, no configuration needed.
        self._constant_gradient = (director_model.constant_potential_gradient()
                                   if self._has_potential else None)
        if self._constant_gradient is not None:
            gradient = self._constant_gradient
            self._constant_director_gradient = gradient[self._director_columns].reshape(-1, 3, 3)
            self._constant_pivot_gradient = gradient[self._pivot_phi_columns].reshape(-1, 3)
            self._constant_force = -gradient[self._translation_columns].reshape(-1, 3)

    # -- flat state <-> structured state ---------------------------------------------------
    def _split(self, q: np.ndarray, mu: np.ndarray):
        R, T = self.group.rotations, self.group.translations
        leading = q.shape[:-1]
        if mu.shape[:-1] != leading:
            leading = np.broadcast_shapes(leading, mu.shape[:-1])
            q = np.broadcast_to(q, leading + q.shape[-1:])
            mu = np.broadcast_to(mu, leading + mu.shape[-1:])
        return (q[..., :9 * R].reshape(leading + (R, 3, 3)),
                mu[..., :3 * R].reshape(leading + (R, 3)),
                q[..., 9 * R:].reshape(leading + (T, 3)),
                mu[..., 3 * R:].reshape(leading + (T, 3)))

    def pack(self, state: LieGroupState) -> tuple[np.ndarray, np.ndarray]:
        """Flat (q, mu) of the integrators from a :class:`LieGroupState`."""
        rotation = np.asarray(state.rotation, dtype=float)
        leading = rotation.shape[:-3]
        q = np.concatenate([rotation.reshape(leading + (-1,)),
                            np.asarray(state.position, float).reshape(leading + (-1,))], axis=-1)
        mu = np.concatenate([np.asarray(state.angular_momentum, float).reshape(leading + (-1,)),
                             np.asarray(state.linear_momentum, float).reshape(leading + (-1,))],
                            axis=-1)
        return q, mu

    def unpack(self, q: np.ndarray, mu: np.ndarray) -> LieGroupState:
        """:class:`LieGroupState` of flat (q, mu)."""
        rotation, angular, position, linear = self._split(np.asarray(q, float),
                                                          np.asarray(mu, float))
        return LieGroupState(rotation.copy(), angular.copy(), position.copy(), linear.copy())

    # -- kinematics --------------------------------------------------------------------------
    def _angular_velocity(self, rotation: np.ndarray, angular: np.ndarray) -> np.ndarray:
        """omega = R J^{-1} R^T mu for every rotation block, (..., R, 3)."""
        body = self.inverse_inertia @ (np.swapaxes(rotation, -1, -2) @ angular[..., None])
        return (rotation @ body)[..., 0]

    def _director_coordinates(self, rotation: np.ndarray, position: np.ndarray) -> np.ndarray:
        """Director q of configurations (K, R, 3, 3), (K, T, 3) -> (K, n)."""
        count = rotation.shape[0]
        out = np.empty((count, self.director_model.n))
        out[:, self._director_columns] = np.swapaxes(rotation, -1, -2).reshape(count, -1)
        out[:, self._translation_columns] = position.reshape(count, -1)
        if self._pivoted.size:
            out[:, self._pivot_phi_columns] = self._pivoted_centres(
                rotation[:, self._pivoted]).reshape(count, -1)
        return out

    def _pivoted_centres(self, rotation: np.ndarray) -> np.ndarray:
        """phi = P - R X of the pivoted bodies (..., NP, 3, 3) -> (..., NP, 3)."""
        return self._pivot_points - np.einsum("...bij,bj->...bi", rotation,
                                               self._pivot_offsets)

    # -- problem interface (flat arrays, any leading axes) -----------------------------------
    def _potential_forces(self, rotation: np.ndarray, position: np.ndarray):
        """Spatial torques (..., R, 3) and forces (..., T, 3) of the potential."""
        leading = rotation.shape[:-3]
        if not self._has_potential:
            return (np.zeros(leading + (self.group.rotations, 3)),
                    np.zeros(leading + (self.group.translations, 3)))
        directors = np.swapaxes(rotation, -1, -2)                         # rows d_k
        if self._constant_gradient is not None:  # uniform gravity: no configuration needed
            # tau = -sum_k d_k x dV/dd_k, plus -(phi - P) x dV/dphi = (R X) x dV/dphi.
            torque = -so3.cross(directors, self._constant_director_gradient).sum(axis=-2)
            if self._pivoted.size:
                arm = np.einsum("...bij,bj->...bi", rotation[..., self._pivoted, :, :],
                                self._pivot_offsets)
                torque[..., self._pivoted, :] += so3.cross(arm, self._constant_pivot_gradient)
            return torque, np.broadcast_to(self._constant_force,
                                           leading + self._constant_force.shape)
        count = int(np.prod(leading, dtype=int))
        coordinates = self._director_coordinates(
            rotation.reshape((count,) + rotation.shape[-3:]),
            position.reshape((count,) + position.shape[-2:]))
        gradient = self.director_model.potential_gradients(coordinates)
        director_gradient = gradient[:, self._director_columns].reshape(directors.shape)
        torque = -so3.cross(directors, director_gradient).sum(axis=-2)
        if self._pivoted.size:
            arm = coordinates[:, self._pivot_phi_columns].reshape(leading + (-1, 3)) \
                - self._pivot_points
            phi_gradient = gradient[:, self._pivot_phi_columns].reshape(arm.shape)
            torque[..., self._pivoted, :] -= so3.cross(arm, phi_gradient)
        force = -gradient[:, self._translation_columns].reshape(
            leading + (self.group.translations, 3))
        return torque, force

    def vector_field(self, q: np.ndarray, mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(xi, n) = f(q, mu) of the paper's eq. (5) (module docstring)."""
        rotation, angular, position, linear = self._split(np.asarray(q, float),
                                                          np.asarray(mu, float))
        leading = rotation.shape[:-3]
        omega = self._angular_velocity(rotation, angular)
        torque, force = self._potential_forces(rotation, position)
        spin = (so3.cross(angular, omega) + torque).reshape(leading + (-1,))
        if not self.group.translations:
            return omega.reshape(leading + (-1,)), spin
        xi = np.concatenate([omega.reshape(leading + (-1,)),
                             (linear / self.masses[:, None]).reshape(leading + (-1,))], axis=-1)
        return xi, np.concatenate([spin, force.reshape(leading + (-1,))], axis=-1)

    def potential(self, q: np.ndarray) -> np.ndarray:
        """V of flat configurations (..., 9R + 3T) -> (...)."""
        q = np.asarray(q, dtype=float)
        leading = q.shape[:-1]
        if not self._has_potential:
            return np.zeros(leading)
        rotation, _, position, _ = self._split(q, np.zeros(self.dim))
        count = int(np.prod(leading, dtype=int))
        coordinates = self._director_coordinates(
            rotation.reshape((count,) + rotation.shape[-3:]),
            position.reshape((count,) + position.shape[-2:]))
        return self.director_model.potential_energies(coordinates).reshape(leading)

    def kinetic_energy(self, q: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """sum mu . omega / 2 + sum |p|^2 / (2 m), (...)."""
        rotation, angular, _, linear = self._split(np.asarray(q, float), np.asarray(mu, float))
        omega = self._angular_velocity(rotation, angular)
        return 0.5 * (np.einsum("...bi,...bi->...", angular, omega)
                      + np.einsum("...bi,...bi,b->...", linear, linear, 1.0 / self.masses))

    def energy(self, q: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """The Hamiltonian H(q, mu), (...)."""
        return self.kinetic_energy(q, mu) + self.potential(q)

    def momentum(self, q: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """The momentum map of left translations: mu itself (right trivialisation)."""
        return np.array(np.broadcast_to(mu, np.broadcast_shapes(np.shape(q)[:-1],
                                                                np.shape(mu)[:-1])
                                        + np.shape(mu)[-1:]), dtype=float)

    def initial_state(self, project: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Flat (q0, mu0) of the state set on the bodies (checked, or projected, by
        :meth:`mbs.Model.initial_state` of the director model)."""
        return self.from_director(*self.director_model.initial_state(project=project))

    # -- conversions -------------------------------------------------------------------------
    def to_director(self, q: np.ndarray, mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Director (q, p) (..., n) of flat Lie-group states (..., 9R + 3T), (..., 3R + 3T)."""
        rotation, angular, position, linear = self._split(np.asarray(q, float),
                                                          np.asarray(mu, float))
        leading = rotation.shape[:-3]
        count = int(np.prod(leading, dtype=int))
        rotation = rotation.reshape((count,) + rotation.shape[-3:])
        angular = angular.reshape((count,) + angular.shape[-2:])
        coordinates = self._director_coordinates(rotation,
                                                 position.reshape((count,) + position.shape[-2:]))
        momenta = np.empty_like(coordinates)
        momenta[:, self._translation_columns] = linear.reshape(count, -1)
        omega = self._angular_velocity(rotation, angular)
        directors = np.swapaxes(rotation, -1, -2)                     # rows d_l
        rates = so3.cross(omega[:, :, None, :], directors)             # rows d_l' = omega x d_l
        momenta[:, self._director_columns] = np.einsum(
            "bkl,nblc->nbkc", self._euler, rates).reshape(count, -1)
        if self._pivoted.size:
            arm = coordinates[:, self._pivot_phi_columns].reshape(count, -1, 3) \
                - self._pivot_points
            velocity = so3.cross(omega[:, self._pivoted], arm)
            momenta[:, self._pivot_phi_columns] = (
                self._rigid_mass[self._pivoted, None] * velocity).reshape(count, -1)
        shape = leading + (self.director_model.n,)
        return coordinates.reshape(shape), momenta.reshape(shape)

    def from_director(self, q: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flat Lie-group (q, mu) of director states (..., n).

        The rotation is the orthogonal polar factor of [d_1 d_2 d_3] (the matrix itself for a
        state on the constraint manifold, to round-off); mu = sum_k d_k x p_{d_k} about the
        centre of mass, plus (phi - P) x p_phi for a pivoted body.
        """
        q = self.director_model.checked_state(q, "q", "LieGroupModel.from_director")
        p = self.director_model.checked_state(p, "p", "LieGroupModel.from_director")
        leading = np.broadcast_shapes(q.shape[:-1], p.shape[:-1])
        count = int(np.prod(leading, dtype=int))
        q = np.broadcast_to(q, leading + q.shape[-1:]).reshape(count, -1)
        p = np.broadcast_to(p, leading + p.shape[-1:]).reshape(count, -1)
        R = self.group.rotations
        directors = q[:, self._director_columns].reshape(count, R, 3, 3)
        director_momenta = p[:, self._director_columns].reshape(count, R, 3, 3)
        rotation = directors.copy()
        if R:
            u, _, vt = np.linalg.svd(np.swapaxes(directors, -1, -2))
            rotation = u @ vt
        angular = so3.cross(directors, director_momenta).sum(axis=-2)
        if self._pivoted.size:
            arm = q[:, self._pivot_phi_columns].reshape(count, -1, 3) - self._pivot_points
            linear_pivoted = p[:, self._pivot_phi_columns].reshape(count, -1, 3)
            angular[:, self._pivoted] += so3.cross(arm, linear_pivoted)
        flat_q = np.concatenate([rotation.reshape(count, -1),
                                 q[:, self._translation_columns]], axis=1)
        flat_mu = np.concatenate([angular.reshape(count, -1),
                                  p[:, self._translation_columns]], axis=1)
        return (flat_q.reshape(leading + flat_q.shape[-1:]),
                flat_mu.reshape(leading + flat_mu.shape[-1:]))

    def orthogonality_defect(self, q: np.ndarray) -> np.ndarray:
        """max |R^T R - I| over the rotation blocks of flat configurations (..., 9R + 3T)."""
        q = np.asarray(q, dtype=float)
        rotation = q[..., :9 * self.group.rotations].reshape(
            q.shape[:-1] + (self.group.rotations, 3, 3))
        defect = np.abs(np.swapaxes(rotation, -1, -2) @ rotation - np.eye(3))
        return defect.reshape(q.shape[:-1] + (9 * self.group.rotations,)).max(axis=-1,
                                                                               initial=0.0)

    def __repr__(self) -> str:
        pivoted = ", ".join(f"{name} about {np.array2string(point, precision=4)}"
                            for name, point in self.pivots.items()) or "none"
        return (f"LieGroupModel(SO(3)^{self.group.rotations} x (R^3)^"
                f"{self.group.translations}, dim = {self.dim}; rotating: "
                f"{', '.join(self.rotating_bodies) or 'none'}; translating: "
                f"{', '.join(self.translating_bodies) or 'none'}; pivoted: {pivoted})")


# ----------------------------------------------------------------------------------------------
# Public conversions
# ----------------------------------------------------------------------------------------------


def lie_group_to_director(model: LieGroupModel, state: LieGroupState
                          ) -> tuple[np.ndarray, np.ndarray]:
    """Director coordinates and momenta (q, p), shape (..., n), of a Lie-group state.

    q = (phi, d_1, d_2, d_3) per rigid body with [d_1 d_2 d_3] = R and phi the centre of mass
    (P - R X for a pivoted body); p_phi = m phi', p_{d_k} = sum_l E_kl (omega x d_l) with
    omega = R J^{-1} R^T mu. The inverse of :func:`director_to_lie_group` on consistent states.
    """
    return model.to_director(*model.pack(state))


def director_to_lie_group(model: LieGroupModel, q: np.ndarray, p: np.ndarray) -> LieGroupState:
    """The :class:`LieGroupState` of director coordinates and momenta (..., n).

    R is the orthogonal polar factor of [d_1 d_2 d_3]; mu = sum_k d_k x p_{d_k} (about the
    centre of mass; plus (phi - P) x p_phi for a body pivoted at P); free centres of mass and
    point masses keep (phi, p_phi).
    """
    return model.unpack(*model.from_director(q, p))


# ----------------------------------------------------------------------------------------------
# Compilation
# ----------------------------------------------------------------------------------------------


def compile_formulation(system, formulation: str):
    """``system.compile(formulation=...)`` for formulations other than "director"."""
    if formulation == "lie-group":
        return compile_lie_group(system)
    raise ModelError(f"System.compile: unknown formulation {formulation!r}; choose one of "
                     f"{', '.join(repr(f) for f in FORMULATIONS)}")


def compile_lie_group(system) -> LieGroupModel:
    """Build the :class:`LieGroupModel` of ``system`` (module docstring).

    Supported: free rigid bodies, rigid bodies fixed to the ground by one spherical joint (the
    pivot of their rotation), point masses, and every potential. Anything else (other joints,
    spherical joints between two bodies, user constraints and drives, loads, dampers and
    actuators) raises :class:`mbs.ModelError` naming each element and why.
    """
    from mbs.joints.point_joints import Spherical

    problems: list[str] = []
    pivots: dict[str, tuple[np.ndarray, str]] = {}
    for joint in system.joints:
        kind = type(joint).__name__
        if not isinstance(joint, Spherical):
            problems.append(f"{kind} {joint.name!r}: the Lie-group formulation represents "
                            f"joints by minimal coordinates and has these only for a "
                            f"spherical joint fixing a rigid body to the ground")
            continue
        grounded = [b for b in joint.bodies if b is system.ground]
        moving = [b for b in joint.bodies if b is not system.ground]
        if not grounded:
            problems.append(f"Spherical {joint.name!r} joins two bodies "
                            f"({joint.body_a.name!r}, {joint.body_b.name!r}): a joint between "
                            f"bodies needs constraints on the group, which the variational Lie "
                            f"group integrators (Bogfjellmo and Marthinsen, 2014) do not cover")
            continue
        body = moving[0]
        if isinstance(body, PointMass):
            problems.append(f"Spherical {joint.name!r} fixes point mass {body.name!r} to the "
                            f"ground: it has no motion left to integrate")
        elif body.name in pivots:
            problems.append(f"Spherical {joint.name!r} is a second spherical joint from "
                            f"{body.name!r} to the ground (after {pivots[body.name][1]!r}): "
                            f"together they leave a revolute joint")
        elif isinstance(body, RigidBody):
            pivots[body.name] = (np.array(joint.point, dtype=float), joint.name)
    for constraint in system.user_constraints:
        problems.append(f"{type(constraint).__name__} {constraint.name!r}: user constraints "
                        f"and drives are not supported by the Lie-group formulation")
    director = system.compile()
    if director.applied_forces is not None:
        for term in director.applied_forces.terms:
            try:
                kind = type(system[term.name]).__name__
            except KeyError:  # "<joint>.damping"
                kind = "joint damping"
            problems.append(f"{kind} {term.name!r} does work (applied force, damper or "
                            f"actuator): the variational Lie group integrators need a "
                            f"Hamiltonian (conservative) system")
    if problems:
        raise ModelError("System.compile(formulation='lie-group') cannot represent this "
                         "system; formulation='director' (the default) handles all of it:\n  "
                         + "\n  ".join(problems))
    _warn_slender_bodies(system)
    return LieGroupModel(director, pivots)


#: Ratio of the largest to the smallest principal moment of inertia above which
#: :func:`compile_lie_group` warns: the schemes' error grows with it (at h = 0.01 a free rod
#: spinning about its axis with ratio 17 has the director formulation's error, with ratio
#: 1700 a hundred times it), and a needle (1e6) needs sub-steps at nearly every step.
SLENDER_RATIO = 1e3


def _warn_slender_bodies(system) -> None:
    for body in system.bodies:
        if isinstance(body, RigidBody):
            moments = np.linalg.eigvalsh(body.inertia)
            if moments[-1] > SLENDER_RATIO * moments[0]:
                warn_user(
                    f"RigidBody {body.name!r}: its principal moments of inertia span a ratio "
                    f"of {moments[-1] / moments[0]:.3g} (a slender or needle-like body); the "
                    f"Lie-group schemes lose accuracy on such bodies, their error growing with "
                    f"this ratio, and may fail. The director formulation (the default) is "
                    f"unaffected", RuntimeWarning)
