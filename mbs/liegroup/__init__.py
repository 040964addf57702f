"""Symplectic partitioned Lie group integrators on T*G (VRKMK and VCG).

Implements G. Bogfjellmo and H. Marthinsen, "High order symplectic partitioned Lie group
methods" (preprint, 2014): the variational Runge-Kutta-Munthe-Kaas methods of eq. (16)
(:class:`VRKMK`) and the variational Crouch-Grossman methods of eq. (18) (:class:`VCG`), for
Hamiltonian systems in right-trivialised form q' = xi . q, mu' = n - ad*_xi mu (eq. (5)).

* :mod:`mbs.liegroup.so3`: exp, log, dexp, dexp^{-1} (closed form and truncated series),
  the derivative of the truncated series, Cayley map;
* :mod:`mbs.liegroup.problems`: the group interface, the problem interface and the rigid-body
  test problems (dipole on a stick, free body, heavy top) plus a point mass on R^3;
* :mod:`mbs.liegroup.vrkmk`, :mod:`mbs.liegroup.vcg`: the methods;
* :mod:`mbs.liegroup.integrator`: the Newton stage solver and :func:`integrate`.
"""

from mbs.liegroup import so3
from mbs.liegroup.integrator import (
    SolverSettings,
    StepResult,
    Trajectory,
    finite_difference_jacobian,
    integrate,
    solve_stage_equations,
)
from mbs.liegroup.problems import (
    DipoleOnStick,
    DirectorPotentialBody,
    FreeRigidBody,
    HeavyTop,
    LieGroup,
    PointMassProblem,
    Problem,
    RigidBodyProblem,
    SO3Group,
    TranslationGroup,
    director_state,
    euler_tensor,
    lie_state,
)
from mbs.liegroup.vcg import COMPOSITIONS, VCG, VCGTableauStep, composition_tableau
from mbs.liegroup.vrkmk import TABLEAUX, VRKMK, Tableau, adjoint_weights

__all__ = [
    "COMPOSITIONS", "TABLEAUX", "VCG", "VRKMK", "DipoleOnStick", "DirectorPotentialBody",
    "FreeRigidBody", "HeavyTop", "director_state", "euler_tensor", "lie_state",
    "LieGroup", "PointMassProblem", "Problem", "RigidBodyProblem", "SO3Group", "SolverSettings",
    "StepResult", "Tableau", "Trajectory", "TranslationGroup", "VCGTableauStep",
    "adjoint_weights", "composition_tableau", "finite_difference_jacobian", "integrate",
    "solve_stage_equations", "so3",
]
