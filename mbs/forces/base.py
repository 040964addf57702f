"""Potentials written through quadratic invariants.

A potential element declares invariants pi(q), each a quadratic form in q (squared spring
length, |phi - c|^2, phi . d_i, ...), and a scalar function V~(pi). The framework derives
grad V = (dpi/dq)^T grad V~, the Hessian, and the momentum-conserving discrete gradient of
seed 003, eqs. (125)-(126):

    D^G V(q0, q1) = (dpi/dq)(q_mid)^T D V~(pi0, pi1),

with D V~ a discrete gradient in pi-space (Greenspan's quotient for one invariant, Gonzalez's
midpoint formula for several). Directionality V(q1) - V(q0) = D^G V . (q1 - q0) holds because pi
is quadratic (so pi1 - pi0 = dpi/dq(q_mid) (q1 - q0) exactly), and orthogonality to a symmetry
generator holds because pi is invariant under it.

Evaluation is vectorised per term class: all elements of one :class:`InvariantTerm` subclass are
stacked and evaluated in one call of its ``energy``/``gradient``/``hessian``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbs.elements import Element
from mbs.errors import ModelError, ModelTypeError
from mbs.joints.base import Joint
from mbs.quadratic import AffineVector


class InvariantTerm:
    """A scalar function V~(pi) of ``n_invariants`` invariants, vectorised over elements.

    Subclasses set ``n_invariants`` and implement the three class methods. ``pi`` has shape
    (n_elements, n_invariants); ``params`` maps names to arrays with leading dimension
    n_elements. ``polynomial_degree`` (if 1 or 2) lets the discrete gradient use the exact
    midpoint formula instead of a difference quotient.
    """

    n_invariants = 1
    polynomial_degree: int | None = None

    @classmethod
    def energy(cls, pi: np.ndarray, params: dict) -> np.ndarray:
        """V~ per element, shape (n_elements,)."""
        raise NotImplementedError

    @classmethod
    def gradient(cls, pi: np.ndarray, params: dict) -> np.ndarray:
        """dV~/dpi, shape (n_elements, n_invariants)."""
        raise NotImplementedError

    @classmethod
    def hessian(cls, pi: np.ndarray, params: dict) -> np.ndarray:
        """d^2V~/dpi^2, shape (n_elements, n_invariants, n_invariants)."""
        raise NotImplementedError

    @classmethod
    def energy_scale(cls, pi: np.ndarray, params: dict) -> np.ndarray:
        """Size of the terms summed in :meth:`energy`, (n_elements,): its round-off is eps
        times this. The default |V~| suits a V~ that is one product of factors; a V~ whose
        terms cancel returns the sum of their magnitudes."""
        return np.abs(cls.energy(pi, params))

    @classmethod
    def range_exits(cls, pi_series: np.ndarray, params: dict) -> np.ndarray | None:
        """For a V~ valid only on part of the configurations (a torsion spring's half turn
        about its rest angle): per element, the first state of ``pi_series`` (states,
        elements, invariants) outside that part, -1 where none is; None (the default) for
        a V~ valid everywhere."""
        return None

    @classmethod
    def singular_distance(cls, pi: np.ndarray, params: dict) -> np.ndarray | None:
        """For a V~ singular at some configurations (1/r at an attracting centre): per
        element, the distance (in the model's length unit) from ``pi`` (n_elements,
        n_invariants) to the nearest of them; None (the default) for a V~ regular
        everywhere."""
        return None

    @classmethod
    def singular_travel(cls, pi0: np.ndarray, pi_mid: np.ndarray, pi1: np.ndarray,
                        params: dict) -> np.ndarray | None:
        """For a V~ with :meth:`singular_distance`: per element, how far the point whose
        distance that measures moved between two configurations with invariants ``pi0``
        and ``pi1`` (``pi_mid`` at their midpoint), in the same unit; None (the
        default) otherwise."""
        return None

    @classmethod
    def invariant_scales(cls, pi0: np.ndarray, params: dict) -> np.ndarray:
        """Characteristic magnitude of each invariant, (n_elements, n_invariants).

        Used to weight the multivariate discrete gradient and to decide when pi1 ~ pi0. The
        default is |pi| at the initial state, or 1 where that vanishes.
        """
        scales = np.abs(pi0)
        return np.where(scales > 0.0, scales, 1.0)


@dataclass
class Invariant:
    """One invariant: sum of scale * (a . b) over ``products`` plus ``constant``."""

    products: list[tuple[AffineVector, AffineVector, float]]
    constant: float = 0.0


@dataclass
class TermInstance:
    """One element's contribution to a term class: its invariants and parameters."""

    term: type[InvariantTerm]
    invariants: list[Invariant]
    params: dict


class Force(Element):
    """A conservative force element; subclasses return their :class:`TermInstance` list."""

    kind = "force"
    #: Field forces (gravity) act on bodies from the ground; shown as ground edges in the graph.
    is_field = False

    def bodies_acted_on(self) -> list:
        """Bodies this element depends on (edges of the system graph)."""
        raise NotImplementedError

    def referenced_bodies(self) -> list:
        """Bodies named explicitly by the user (checked when the force is added)."""
        return self.bodies_acted_on()

    def terms(self, context) -> list[TermInstance]:
        raise NotImplementedError


class JointElement(Force):
    """A force acting across a joint, on its two bodies (actuators, dampers, torsion
    springs); :meth:`_attach` checks the joint's type."""

    def _attach(self, joint, coordinates: dict, instead: str):
        """Keep ``joint`` (and ``owner``, the element's name for messages) and return
        ``coordinates[joint type name]``, the joint coordinate the element acts on ("angle"
        or "displacement"); a joint of another type is an error suggesting ``instead``."""
        owner = self.owner = f"{type(self).__name__} {self.name!r}"
        if not isinstance(joint, Joint):
            raise ModelTypeError(f"{owner}: joint must be a joint, got {joint!r}")
        coordinate = coordinates.get(type(joint).__name__)
        if coordinate is None:
            raise ModelError(f"{owner}: a {type(self).__name__} acts on "
                             f"{' or '.join(sorted(coordinates))} joints, got "
                             f"{type(joint).__name__} {joint.name!r}; {instead}")
        self.joint = joint
        return coordinate

    def bodies_acted_on(self):
        return list(self.joint.bodies)

    def referenced_bodies(self):
        if self.joint.system is None:
            raise ModelError(f"{self.owner}: joint {self.joint.name!r} is not in a system; add "
                             f"the joint first")
        return list(self.joint.bodies)


def squared_distance(relative: AffineVector) -> Invariant:
    """|r|^2 for an affine vector r."""
    return Invariant([(relative, relative, 1.0)])


def dot(a: AffineVector, b: AffineVector) -> Invariant:
    """a . b."""
    return Invariant([(a, b, 1.0)])


def discrete_invariant_gradient(term: type[InvariantTerm], pi0: np.ndarray, pi1: np.ndarray,
                                params: dict, scales: np.ndarray,
                                roundoff_factor: float = 8.0, jacobian: bool = False):
    """Discrete gradient D V~(pi0, pi1) in pi-space, shape (n_elements, n_invariants), and
    with ``jacobian`` its exact derivative dD/dpi1, shape (n_elements, k, k): Newton's
    method then converges quadratically also for potentials that are no polynomials.

    For degree <= 2 polynomials the midpoint gradient is exact. Otherwise Gonzalez's formula in
    the metric W = diag(1/scales^2):

        D V~ = grad V~(pi_mid) + (V~1 - V~0 - grad V~(pi_mid) . dpi) W dpi / (dpi . W dpi),

    which for one invariant is Greenspan's quotient (V~1 - V~0)/(pi1 - pi0). Where the residual
    V~1 - V~0 - grad V~(pi_mid) . dpi is at round-off level (below ``roundoff_factor`` * eps *
    (s0 + s1 + |grad V~(pi_mid)| |dpi|), s the :meth:`InvariantTerm.energy_scale` at pi0 and
    pi1) the quotient would divide round-off by a tiny dpi; there Simpson's rule for the
    mean gradient along the segment is used instead,

        D V~ = (grad V~(pi0) + 4 grad V~(pi_mid) + grad V~(pi1)) / 6,

    whose directionality error is O(|dpi|^5), far below round-off. (The midpoint gradient's
    error, O(|dpi|^3), is below round-off too, but has the same sign step after step: at
    small steps it adds up to a steady energy drift.) The test is scale free, so it neither
    depends on the invariants' magnitude at the initial state nor on how fast V~ varies.
    """
    mid = 0.5 * (pi0 + pi1)
    grad_mid = term.gradient(mid, params)
    if term.polynomial_degree is not None and term.polynomial_degree <= 2:
        return (grad_mid, 0.5 * term.hessian(mid, params)) if jacobian else grad_mid
    delta = pi1 - pi0
    energy0, energy1 = term.energy(pi0, params), term.energy(pi1, params)
    residual = energy1 - energy0 - np.sum(grad_mid * delta, axis=1)
    roundoff = roundoff_factor * np.finfo(float).eps * (
        term.energy_scale(pi0, params) + term.energy_scale(pi1, params)
        + np.sum(np.abs(grad_mid * delta), axis=1))
    use_quotient = np.abs(residual) > roundoff
    base = grad_mid  # what the quotient corrects; Simpson's mean where it is not used
    grad1 = term.gradient(pi1, params) if jacobian or not np.all(use_quotient) else None
    if not np.all(use_quotient):
        simpson = (term.gradient(pi0, params) + 4.0 * grad_mid + grad1) / 6.0
        base = np.where(use_quotient[:, None], grad_mid, simpson)
        if not np.any(use_quotient) and not jacobian:
            return base
    weighted = delta / scales**2
    norm2 = np.sum(delta * weighted, axis=1)
    safe_norm2 = np.where(use_quotient, norm2, 1.0)
    factor = np.where(use_quotient, residual / safe_norm2, 0.0)
    gradient = base + factor[:, None] * weighted
    if not jacobian:
        return gradient
    # d/dpi1 of grad_mid + f w, w = W delta, f = residual / (delta . W delta):
    # H_mid / 2 + f W + w (x) (grad V~(pi1) - grad_mid - H_mid delta / 2 - 2 f w) / norm2;
    # of Simpson's mean: (2 H_mid + H(pi1)) / 6
    hessian_mid = term.hessian(mid, params)
    k = pi0.shape[1]
    slope = (grad1 - grad_mid - 0.5 * np.einsum("eij,ej->ei", hessian_mid, delta)
             - 2.0 * factor[:, None] * weighted) / safe_norm2[:, None]
    quotient = (0.5 * hessian_mid + factor[:, None, None] * np.eye(k) / scales[:, :, None]**2
                + np.einsum("ei,ej->eij", weighted, slope))
    if np.all(use_quotient):
        return gradient, quotient
    mean = (2.0 * hessian_mid + term.hessian(pi1, params)) / 6.0
    return gradient, np.where(use_quotient[:, None, None], quotient, mean)
