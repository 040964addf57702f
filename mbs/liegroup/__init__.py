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
* :mod:`mbs.liegroup.integrator`: the Newton stage solver and :func:`integrate`;
* :mod:`mbs.liegroup.model`: ``System.compile(formulation="lie-group")``, the
  :class:`LieGroupModel` of a system on SO(3)^R x (R^3)^T and the state conversions to and from
  the director formulation; :mod:`mbs.liegroup.simulation`: the scheme :func:`mbs.simulate`
  drives for it;
* :mod:`mbs.liegroup.homogeneous`: Method B of R. T. Sato Martin de Almagro (preprint), the
  nonholonomic partitioned RKMK integrators on S^2 = SO(3)/SO(2).
"""

from mbs.liegroup import so3
from mbs.liegroup.homogeneous import MethodB, SphericalPendulum, integrate_method_b
from mbs.liegroup.integrator import (
    SolverSettings,
    StepResult,
    Trajectory,
    finite_difference_jacobian,
    integrate,
    solve_stage_equations,
)
from mbs.liegroup.model import (
    LieGroupModel,
    LieGroupState,
    ProductGroup,
    compile_lie_group,
    director_to_lie_group,
    lie_group_to_director,
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
from mbs.liegroup.simulation import LieGroupSolver, lie_group_solver, make_method
from mbs.liegroup.vcg import COMPOSITIONS, VCG, VCGTableauStep, composition_tableau
from mbs.liegroup.vrkmk import TABLEAUX, VRKMK, Tableau, adjoint_weights

__all__ = [
    "COMPOSITIONS", "TABLEAUX", "VCG", "VRKMK", "DipoleOnStick", "DirectorPotentialBody",
    "FreeRigidBody", "HeavyTop", "director_state", "euler_tensor", "lie_state",
    "LieGroup", "PointMassProblem", "Problem", "RigidBodyProblem", "SO3Group", "SolverSettings",
    "StepResult", "Tableau", "Trajectory", "TranslationGroup", "VCGTableauStep",
    "adjoint_weights", "composition_tableau", "finite_difference_jacobian", "integrate",
    "solve_stage_equations", "so3", "LieGroupModel", "LieGroupState", "ProductGroup",
    "compile_lie_group", "director_to_lie_group", "lie_group_to_director", "make_method",
    "LieGroupSolver", "lie_group_solver", "MethodB", "SphericalPendulum", "integrate_method_b",
]
