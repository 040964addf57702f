"""Simulation results with conserved-quantity and constraint diagnostics."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy.spatial.transform import Rotation

from mbs.elements import Element
from mbs.errors import ModelError, ModelTypeError, UnknownNameError, warn_user
from mbs.joints.base import is_angle
from mbs.model import Model
from mbs.symmetry import conserved_directions, generic_states, in_span, symmetry_axis_points
from mbs.validation import as_scalar, as_vector

#: A momentum below this fraction of the terms it is summed from is zero to round-off (the
#: rounding of a sum of k terms is at most about k eps of their sizes).
ROUNDOFF_SIZE = 1e3 * np.finfo(float).eps
#: A momentum that a scheme keeping it to round-off changed in one step by more than this
#: fraction of the terms it is summed from was not conserved by the model, whatever the
#: invariance check at sampled states found (a contact load of a few steps changes it by
#: its own size; a step's solve leaves round-off, or the solve tolerance squared).
MISSED_BREAK_LEVEL = 1e-6
#: Node velocities off the velocity constraints by more than this fraction of the terms of
#: G M^-1 p get a line in the conservation summary (schemes that do not enforce that level at
#: the nodes: ggl-vi-s, ggl-vi-a, hbvm).
VELOCITY_DRIFT_LEVEL = 1e-2
#: Nodes at which :func:`velocity_term_scale` evaluates G.
VELOCITY_CHECK_NODES = 200


def vertical_axis(gravity) -> np.ndarray | None:
    """The unit vector against uniform ``gravity`` (None without it): under uniform gravity
    only the angular momentum about the vertical can be a first integral."""
    if gravity is None or not np.linalg.norm(gravity) > 0.0:
        return None
    return -np.asarray(gravity, dtype=float) / np.linalg.norm(gravity)


@dataclass(eq=False)
class BodyTrajectory:
    """Motion of one body along a solution (world frame unless stated).

    Attributes
    ----------
    position : (N+1, 3)
        Centre of mass (rigid body) or particle position.
    rotation : (N+1, 3, 3) or None
        Columns are the directors d1, d2, d3 (rigid bodies only).
    velocity : (N+1, 3)
        From v = M^-1 p at the nodes.
    angular_velocity, angular_velocity_body : (N+1, 3) or None
        omega = 1/2 sum_i d_i x d_i' (world) and R^T omega (body frame).
    t : (N+1,)
        The node times the arrays belong to.
    """

    name: str
    position: np.ndarray
    velocity: np.ndarray
    rotation: np.ndarray | None = None
    angular_velocity: np.ndarray | None = None
    angular_velocity_body: np.ndarray | None = None
    t: np.ndarray = field(kw_only=True)

    def _rotations(self, what: str):
        if self.rotation is None:
            raise ModelError(f"{what}: {self.name!r} is a point mass, which has no "
                             f"orientation")
        # the nearest rotation: directors are orthonormal to the scheme's accuracy only
        # (ggl-vi-a's nodes, sums of round-off)
        return Rotation.from_matrix(self.rotation)

    def quaternions(self, scalar_first: bool = True) -> np.ndarray:
        """(N+1, 4) unit quaternions of the body's rotation (w, x, y, z), or (x, y, z, w)
        with ``scalar_first=False``; of the nearest rotation matrix to the directors. Signs
        are chosen continuous along the run (q and -q are the same rotation), so that the
        components can be plotted and differentiated."""
        values = self._rotations("quaternions").as_quat()  # (x, y, z, w)
        flips = np.cumsum(np.r_[0, np.einsum("ni,ni->n", values[1:], values[:-1]) < 0.0])
        values *= np.where(flips % 2, -1.0, 1.0)[:, None]
        return np.roll(values, 1, axis=1) if scalar_first else values

    def euler_angles(self, sequence: str = "ZYX", degrees: bool = False) -> np.ndarray:
        """(N+1, 3) Euler angles of the body's rotation in ``sequence`` (scipy's convention:
        upper case intrinsic, lower case extrinsic axes; "ZYX" is yaw, pitch, roll),
        continuous along the run: they start in scipy's ranges and then neither jump by
        2 pi nor switch to the other set of angles of the same rotation, (a + pi, pi - b,
        c + pi) for three distinct axes and (a + pi, -b, c + pi) for "ZXZ"-like sequences,
        so a body turning through pitch 90 degrees keeps turning in its middle angle instead
        of flipping the other two. At the sequence's singular pose itself (pitch +-90
        degrees for "ZYX") only the sum or difference of the first and last angle is
        defined, and a node that lands on it exactly gets scipy's split of it (the last
        angle 0), which can differ from its neighbours'; a motion that lingers there may
        jump in them too: use :meth:`quaternions` or the rotation matrices there."""
        if not (isinstance(sequence, str) and len(sequence) == 3
                and (set(sequence) <= set("XYZ") or set(sequence) <= set("xyz"))
                and sequence[0].lower() != sequence[1].lower() != sequence[2].lower()):
            raise ModelError(f"euler_angles: sequence must be three axes from 'XYZ' (intrinsic) "
                             f"or 'xyz' (extrinsic), no two neighbours equal, e.g. 'ZYX' or "
                             f"'zxz'; got {sequence!r}")
        with warnings.catch_warnings():  # gimbal lock: documented above
            warnings.simplefilter("ignore", UserWarning)
            angles = self._rotations("euler_angles").as_euler(sequence)
        angles = _continuous_euler_angles(angles, proper=sequence[0].lower()
                                          == sequence[2].lower())
        return np.degrees(angles) if degrees else angles


def _continuous_euler_angles(angles: np.ndarray, proper: bool) -> np.ndarray:
    """Euler angles (N+1, 3) made continuous: from node to node the one of the two sets of
    the rotation (the other is (a + pi, pi - b, c + pi), or (a + pi, -b, c + pi) for a
    ``proper`` Euler sequence) nearer to the set taken at the node before, then unwrapped.
    The distance between the two sets at neighbouring nodes is that of the first set, so
    the set switches where the first set is farther from its neighbour than the second:
    the parity of those switches picks the set at each node."""
    other = angles + np.array([np.pi, 0.0, np.pi])
    other[:, 1] = -angles[:, 1] if proper else np.pi - angles[:, 1]

    def distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.abs(np.angle(np.exp(1j * (a - b)))).sum(axis=1)

    switches = distance(other[1:], angles[:-1]) < distance(angles[1:], angles[:-1])
    taken = np.concatenate([[False], np.cumsum(switches) % 2 == 1])
    return np.unwrap(np.where(taken[:, None], other, angles), axis=0)


@dataclass(eq=False)
class JointTrajectory:
    """Motion of a joint's axis coordinate along a solution.

    Attributes
    ----------
    coordinate : "angle", "displacement", "angle_a" or "angle_b"
    position : (N+1,)
        Angle of body_b relative to body_a about the axis (rad, 0 at the initial pose,
        continuous over turns) or displacement along it (m); a universal joint's angle about
        one of its cross axes (see :meth:`Solution.joint`).
    rate : (N+1,)
        Its rate from v = M^-1 p at the nodes.
    t : (N+1,)
        The node times.
    """

    name: str
    coordinate: str
    position: np.ndarray
    rate: np.ndarray
    t: np.ndarray = field(kw_only=True)


@dataclass(eq=False)
class DriveTrajectory:
    """A drive along a solution (see :class:`mbs.joints.Drive`).

    Attributes
    ----------
    position, rate : (N+1,)
        The driven angle or displacement and its rate at the nodes.
    effort : (N,)
        The torque (force) the drive exerts on body_b about (along) the axis in step
        n -> n+1: minus the drive's multiplier of the step (its time in
        ``solver_properties.multiplier_times``), or minus the mean of the multipliers at the
        step's two ends for rattle and lobatto. The multipliers of ggl-vi-a and hbvm
        alternate from step to step about the reaction (by O(h)); their effort is the centred
        average (e_{n-1} + 2 e_n + e_{n+1}) / 4, which removes the alternation and changes a
        smooth effort by O(h^2). ``Solution.multipliers`` keeps the raw values. A step that
        simulate redid as sub-steps has the mean of its sub-steps' multipliers (where the
        alternation cancels: the centred average next to it keeps an O(h) part of its
        neighbours' alternation). ``Solution.reaction(drive)`` maps the same multiplier
        through the drive's constraint gradient at the step's midpoint configuration, whose
        directors are not exactly orthonormal: its torque about (force along) the axis
        agrees with ``effort`` to O(h^2). Use ``effort`` for the motor's torque (force),
        the reaction for the full vector the drive exerts.
    work : (N+1,)
        Cumulative sum of effort_n (position_{n+1} - position_n), 0 at the start: a
        second-order estimate of the drive's work (``Solution.work`` holds the scheme's own,
        exact for "em"). Second order for the high-order schemes too, so the energy balance
        of a driven model run with lobatto or a composition is second order, with a constant
        that grows with the number of stages.
    t : (N+1,)
        The node times (of position, rate and work; effort_n belongs to [t_n, t_{n+1}],
        whose midpoints are :attr:`effort_times`).
    """

    name: str
    coordinate: str
    position: np.ndarray
    rate: np.ndarray
    effort: np.ndarray
    work: np.ndarray
    t: np.ndarray = field(kw_only=True)

    @property
    def effort_times(self) -> np.ndarray:
        """The step midpoints (t_n + t_{n+1}) / 2, (N,): the times to compare ``effort``
        with, e.g. a torque law of time (the times of ForceTrajectory and
        ReactionTrajectory)."""
        return 0.5 * (self.t[1:] + self.t[:-1])

    @property
    def power(self) -> np.ndarray:
        """The drive's mean power in each step, (N,): its work in the step over the step's
        length (at :attr:`effort_times`). Second order, but first order for ggl-vi-a: its
        nodes meet the prescribed motion at the step midpoints only, off it by O(h^2) at the
        nodes, which the position difference over one step turns into O(h) (its
        cumulative :attr:`work` stays second order)."""
        return np.diff(self.work) / np.diff(self.t)


@dataclass(eq=False)
class ForceTrajectory:
    """A load, damper or actuator along a solution (see :meth:`Solution.force`).

    Attributes
    ----------
    name : str
    t : (N,)
        The step midpoints t_n + h/2.
    effort : (N,) or None
        The torque (force) about (along) the axis of a joint actuator or joint damper, or
        the force along the line of a two-point damper, at the step's midpoint state
        ((q_n + q_{n+1}) / 2 and the secant velocity); None for loads.
    work : (N+1,)
        Cumulative work, 0 at the start, applied as the energy-momentum scheme applies it:
        Q(t_n + h/2, (q_n + q_{n+1}) / 2, (q_{n+1} - q_n) / h) . (q_{n+1} - q_n) per step.
        For "em" the works of all elements sum to ``Solution.work`` to round-off; for the
        other schemes, and for compositions of "em", it is a second-order estimate, whose
        error at a given h can exceed the scheme's own (a torque's work on coarse steps
        especially: the midpoint rule above gives tau 2 tan(dtheta / 2) per step, not
        tau dtheta); ``Solution.work`` holds the scheme's own.
    power : (N,)
        The mean power in each step: its work over its length.
    """

    name: str
    t: np.ndarray
    effort: np.ndarray | None
    work: np.ndarray
    power: np.ndarray


@dataclass(eq=False)
class ReactionTrajectory:
    """What a joint exerts on one of its bodies along a solution (see
    :meth:`Solution.reaction`).

    Attributes
    ----------
    name, body : str
        The joint and the body acted on.
    t : (N,)
        The step midpoints t_n + h/2.
    force : (N, 3)
        The joint's force on the body in step n -> n+1 (world frame, or the body's with
        ``frame="body"``).
    torque : (N, 3)
        Its torque on the body about the body's centre of mass (or the point given by
        ``about``), in the same frame; zero for a point mass.
    """

    name: str
    body: str
    t: np.ndarray
    force: np.ndarray
    torque: np.ndarray


@dataclass(eq=False)
class Solution:
    """Time series returned by :func:`mbs.simulate`.

    Attributes
    ----------
    model : Model
    t : (N+1,) times.
    q, p : (N+1, n) coordinates and conjugate momenta at the nodes t_n.
    scheme_velocities : (N, n)
        The scheme's own velocity unknown of step n -> n+1 (v^n for ggl-vi-s, v^{n+1} for
        ggl-vi-a/b, v^{n+1/2} for em and rattle).
    multipliers, velocity_multipliers : (N, m)
        lambda and gamma of step n -> n+1; their time association is solver-specific and
        given in ``solver_properties.multiplier_times``.
    enforced_residuals : (N, 2)
        Max-norm of the position- and velocity-level residuals the scheme itself enforces
        in step n -> n+1 (possibly at an intermediate configuration).
    step_work : (N,) or None
        Work of the applied forces (loads, dampers, actuators) in step n -> n+1 as the
        scheme computes it; None (or zeros) for conservative models. See :attr:`work`.
    stats : dict
        "newton_iterations" (N,: the iterations of the attempt that solved each step; a
        step solved after a failed or rejected first attempt, counted in "guess_retries"
        (see ``Solver.step``), or as sub-steps, listed in "refined_steps", cost more; a
        composition's are summed over its "sub_steps" steps of the base scheme),
        "wall_time" (s, of the simulate call: for a resumed run, of the steps after
        "resumed_at"), "solver", "h", "steps", and "completed" (False if the run stopped
        early).
    """

    model: Model
    t: np.ndarray
    q: np.ndarray
    p: np.ndarray
    scheme_velocities: np.ndarray
    multipliers: np.ndarray
    velocity_multipliers: np.ndarray
    enforced_residuals: np.ndarray
    stats: dict = field(default_factory=dict)
    solver_properties: object = None
    step_work: np.ndarray | None = None

    @property
    def work(self) -> np.ndarray:
        """Cumulative work of the applied forces and drives up to each node, (N+1,), 0 at the
        start: ``energy() - energy()[0] - work`` is the scheme's energy error (zero to
        round-off for "em", whose steps report the exact work of loads, dampers, actuators
        and drives; for the other schemes the drives' work is estimated from their
        multipliers, see :meth:`drive`)."""
        steps = np.zeros(self.t.size - 1) if self.step_work is None else self.step_work
        total = np.concatenate([[0.0], np.cumsum(steps)])
        if not self.stats.get("drive_work_in_steps", False):
            for name in getattr(self.model, "drives", {}):
                total = total + self.drive(name).work
        return total

    def energy_balance(self) -> np.ndarray:
        """energy() - energy()[0] - work, (N+1,): the energy the scheme gained or lost beyond
        the work of the applied forces."""
        energy = self.energy()
        return energy - energy[0] - self.work

    @property
    def velocities(self) -> np.ndarray:
        """dq/dt at the nodes, M^-1 p, (N+1, n).

        Body velocities and joint rates are read from these. Schemes that do not enforce the
        velocity constraints at the step ends (ggl-vi-s and ggl-vi-a: the solver table's
        "enforced at step ends" column) leave M^-1 p off the constraint manifold
        (``constraint_residuals()["velocity"]``), and these velocities are that accurate:
        by O(h^2) for hbvm and ggl-vi-s (O(h^3) measured on a hinged body), and for ggl-vi-a
        by O(h^2) or O(h), depending on the model (O(h) on a double pendulum, see the
        schemes' concept page)."""
        return (self.model.inverse_mass_matrix @ self.p.T).T

    def _velocities_of(self, coordinates) -> np.ndarray:
        """:attr:`velocities` of one body's ``coordinates`` (a slice or indices), from its
        own block of the inverse mass matrix (block-diagonal per body): the cost of the
        body, not of the model."""
        inverse = self.model.inverse_mass_matrix[coordinates][:, coordinates]
        return np.asarray((inverse @ self.p[:, coordinates].T).T)

    def __len__(self) -> int:
        return self.t.size

    def nodes_at(self, times) -> tuple[np.ndarray, np.ndarray]:
        """Indices of the output times nearest to ``times`` and, per time, whether the node
        coincides with it (to 1e-9 relative): where a solution can be compared with values
        published at given times without interpolating."""
        times = np.asarray(times, dtype=float)
        if not np.all(np.isfinite(times)):
            raise ModelError(f"Solution.nodes_at: times must be finite, got {times!r}")
        t = self.t
        right = np.clip(np.searchsorted(t, times), 0, t.size - 1)
        left = np.clip(right - 1, 0, t.size - 1)
        nearest = np.where(np.abs(t[left] - times) < np.abs(t[right] - times), left, right)
        return nearest, np.abs(t[nearest] - times) <= 1e-9 * (1.0 + np.abs(times))

    def _node_range(self, t0: float | None, t1: float | None) -> tuple[int, int]:
        """(first, last) indices of the nodes with t0 <= t <= t1, node times compared to
        1e-9 relative as in :meth:`nodes_at`; a ModelError for bounds that select none."""
        bounds = [None if value is None else
                  as_scalar(value, f"{name} (a time, or None for the run's {end})",
                            "Solution.window")
                  for name, value, end in (("t0", t0, "start"), ("t1", t1, "end"))]
        t = self.t
        start = float(t[0]) if bounds[0] is None else bounds[0]
        end = float(t[-1]) if bounds[1] is None else bounds[1]
        if start > end:
            raise ModelError(f"Solution.window: t0 = {start!r} is after t1 = {end!r}; give "
                             f"t0 <= t1")
        first = int(np.searchsorted(t, start - 1e-9 * (1.0 + abs(start)), side="left"))
        last = int(np.searchsorted(t, end + 1e-9 * (1.0 + abs(end)), side="right")) - 1
        if last < first:
            raise ModelError(f"Solution.window: no node of the run lies in [{start!r}, "
                             f"{end!r}] (its nodes span [{_time_range(t[0], t[-1])}] with "
                             f"step {self.stats.get('h')}); widen the window to hold at "
                             f"least one node")
        return first, last

    def window(self, t0: float | None = None, t1: float | None = None) -> Solution:
        """The part of the run between two times, as a Solution of the same model.

        Parameters
        ----------
        t0, t1 : float or None
            The window's ends (None: the run's start, its end). It holds the nodes with
            t0 <= t_k <= t1, node times compared with the relative tolerance 1e-9 of
            :meth:`nodes_at` (so that t1 = 0.3 keeps the node at 3 * 0.1).

        Returns
        -------
        Solution
            N' + 1 nodes and the N' steps between them: the node arrays (t, q, p), the step
            arrays (scheme_velocities, multipliers, velocity_multipliers,
            enforced_residuals, step_work) and ``stats["newton_iterations"]`` are the
            corresponding rows of this run's (copies), a Lie-group run's
            ``lie_group_state`` too. Energies, momenta, the arrays of :meth:`body`,
            :meth:`joint` (angles keep the turns made before the window), :meth:`point`,
            :meth:`constraint_residuals`, and the efforts of :meth:`drive`, :meth:`force`
            and :meth:`reaction` equal this run's at the same nodes and steps bitwise (for a
            window of one node to round-off: the model's arithmetic on a single state rounds
            differently; so may the velocity residuals, evaluated in blocks of states);
            :attr:`work` and the drives' and forces' works start at 0 at the window's first
            node (this run's minus their value there, to round-off). What
            continues from the window's first node instead: the unwrapping of
            :meth:`BodyTrajectory.euler_angles` and the sign continuity of
            :meth:`BodyTrajectory.quaternions`, and the momentum derivatives :meth:`at`
            estimates from neighbouring nodes, one-sided at the window's ends (so ``at``
            there differs from the run's within its O(h^4) error).

            ``stats["angle_turns"]`` (and, for efforts averaged over neighbouring steps,
            ``stats["multiplier_context"]`` and ``stats["multiplier_context_row"]``) hold
            what the window reads of the run beyond its nodes; they travel with copies and
            saved files.

            The step indices in ``stats`` keep this run's numbering, which counts from
            ``stats["first_step"]`` at the first node (as for a streamed run that holds its
            last steps only): ``first_step`` is the index of the window's first node,
            ``refined_steps`` lists the window's steps done as sub-steps, and ``restarts``
            those whose redone steps reach into the window (a restart redoes every later
            step as sub-steps too). The rest of ``stats`` (solver, h, steps, completed,
            wall_time, guess_retries, ...) and ``solver_properties`` describe the run.

        Raises
        ------
        ModelError
            Non-finite bounds, t0 > t1, a window that holds no node, or a solution loaded
            from a file without its model (its stored potential and drives belong to the
            whole run: load it with ``mbs.load_solution(path, model=...)``).
        """
        if not isinstance(self.model, Model):
            raise ModelError("Solution.window needs the compiled model: a solution loaded "
                             "without it holds the potential energy and drives of its whole "
                             "run only; load the file with mbs.load_solution(path, "
                             "model=build().compile())")
        first, last = self._node_range(t0, t1)
        nodes, steps = slice(first, last + 1), slice(first, last)
        stats = dict(self.stats)
        iterations = stats.get("newton_iterations")
        if iterations is not None and np.ndim(iterations) == 1:
            stats["newton_iterations"] = np.array(iterations[steps])
        offset = int(stats.get("first_step", 0))
        start, end = offset + first, offset + last  # the window's steps: start .. end - 1
        stats["first_step"] = start
        if "refined_steps" in stats:
            stats["refined_steps"] = [tuple(event) for event in stats["refined_steps"]
                                      if start <= event[0] < end]
        if "restarts" in stats:
            stats["restarts"] = [tuple(event) for event in stats["restarts"]
                                 if event[1] < end]
        # What a window's accessors read of the run beyond its nodes, kept in stats so that
        # copies and saved files keep it: the whole turns of each joint angle at its first
        # node, and the multipliers around its steps that a centred average reads.
        stats["angle_turns"] = self._turns_at(first)
        if stats.get("drive_effort") == "centred":
            rows, row = self._multiplier_rows(first, last)
            stats["multiplier_context"], stats["multiplier_context_row"] = rows, row
        window = Solution(
            model=self.model, t=self.t[nodes].copy(), q=self.q[nodes].copy(),
            p=self.p[nodes].copy(), scheme_velocities=self.scheme_velocities[steps].copy(),
            multipliers=self.multipliers[steps].copy(),
            velocity_multipliers=self.velocity_multipliers[steps].copy(),
            enforced_residuals=self.enforced_residuals[steps].copy(), stats=stats,
            solver_properties=self.solver_properties,
            step_work=None if self.step_work is None else self.step_work[steps].copy())
        group_state = getattr(self, "lie_group_state", None)
        if group_state is not None:
            window.lie_group_state = type(group_state)(
                **{name: np.array(value[nodes]) for name, value in vars(group_state).items()})
        return window

    def _turns_at(self, node: int) -> dict[str, float]:
        """The whole turns (a float holding an integer) that :meth:`joint` adds to each
        joint angle at ``node``: a window starting there continues the run's angles."""
        turns = dict(self.stats.get("angle_turns") or {})
        if node == 0:
            return turns
        for name, coordinates in self.model.joint_coordinates.items():
            for coordinate, term in coordinates.items():
                if is_angle(coordinate):
                    angles = term.batch_coordinate(
                        term.data, self.q[:node + 1, term.local.indices])[0]
                    key = f"{name}.{coordinate}"
                    turns[key] = turns.get(key, 0.0) + _whole_turns(angles)[-1]
        return turns

    def _multiplier_rows(self, first: int, last: int) -> tuple[np.ndarray, int]:
        """(rows, offset): the multipliers that the centred average of steps first .. last
        - 1 reads (three steps either side: the end steps' extrapolation reads the four
        first or last), and the row of step ``first`` in them."""
        rows = self.stats.get("multiplier_context", self.multipliers)
        offset = int(self.stats.get("multiplier_context_row", 0))
        lower = max(0, first + offset - 3)
        upper = min(rows.shape[0], last + offset + 3)
        return rows[lower:upper].copy(), first + offset - lower

    def at(self, times) -> tuple[np.ndarray, np.ndarray]:
        """(q, p) at times inside the run, interpolated between its nodes.

        Parameters
        ----------
        times : float or array_like
            Times in [t[0], t[-1]]; a time that coincides with a node (to the 1e-9
            relative tolerance of :meth:`nodes_at`) returns that node's q and p bitwise.

        Returns
        -------
        q, p : np.ndarray
            (n,) each for a scalar time, otherwise (*times.shape, n).

        Raises
        ------
        ModelError
            Non-finite times, or times outside the run (a window of it, or a longer run,
            covers them).

        Notes
        -----
        Piecewise cubic Hermite interpolation on each step [t_k, t_k+1]: of q with the node
        velocities M^-1 p as its derivatives (the data the solution has), of p with
        derivatives estimated at the nodes by the five-node finite difference (fourth
        order; fewer nodes on runs of fewer than four steps). Where the node values are
        exact, both interpolants are O(h^4) accurate: measured on a pendulum run with
        lobatto (stages=5, whose own error is far smaller) at h = 0.02, 0.01, 0.005
        against a run at h / 8, the error of q falls as h^4.0 and that of p as h^4.1 at
        mid-step times and h^4.2 at quarter steps (p's derivative estimates add an
        O(h^5) part). The node values carry the scheme's own error, so the interpolated
        states are as accurate as the larger of the two, and where the nodes lie off the
        velocity constraints (ggl-vi-a, ggl-vi-s, see :attr:`velocities`) q's derivatives
        carry that too. The interpolated states meet the constraints only to the
        interpolation's accuracy, however tightly the scheme holds them at the nodes:
        between the nodes g(q) is O(h^4) and G(q) M^-1 p O(h^4) (measured h^4.0 and h^4.1
        on that pendulum). p's derivative estimates assume p smooth across the five nodes
        around each node: a jump of a load or a contact spreads over the two steps either
        side of it.
        """
        try:
            if np.iscomplexobj(times):
                raise TypeError("complex")
            requested = np.asarray(times, dtype=float)
        except (TypeError, ValueError):
            raise ModelTypeError(f"Solution.at: times must be real numbers, got "
                                 f"{times!r:.80}") from None
        if not np.all(np.isfinite(requested)):
            raise ModelError(f"Solution.at: times must be finite, got {times!r:.80}")
        flat = requested.ravel()
        t = self.t
        nearest, on_node = self.nodes_at(flat)
        outside = ~on_node & ((flat < t[0]) | (flat > t[-1]))
        if np.any(outside):
            raise ModelError(f"Solution.at: {flat[outside][:3].tolist()} outside the run's "
                             f"[{_time_range(t[0], t[-1])}]; interpolation does not "
                             f"extrapolate: ask for times inside it, or run over a longer "
                             f"span")
        q = np.empty((flat.size, self.q.shape[1]))
        p = np.empty((flat.size, self.p.shape[1]))
        q[on_node], p[on_node] = self.q[nearest[on_node]], self.p[nearest[on_node]]
        between = np.flatnonzero(~on_node)
        if between.size:
            step = np.clip(np.searchsorted(t, flat[between], side="right") - 1, 0,
                           t.size - 2)
            ends = np.unique(np.concatenate([step, step + 1]))
            velocities = (self.model.inverse_mass_matrix @ self.p[ends].T).T
            rates = _node_derivatives(t, self.p, ends)
            left, right = np.searchsorted(ends, step), np.searchsorted(ends, step + 1)
            q[between] = _hermite(t, self.q, velocities, step, left, right, flat[between])
            p[between] = _hermite(t, self.p, rates, step, left, right, flat[between])
        shape = requested.shape + (q.shape[1],)
        return q.reshape(shape), p.reshape(shape)

    # -- conserved quantities -------------------------------------------------------------
    def kinetic_energy(self) -> np.ndarray:
        """T = 1/2 p^T M^-1 p at each node, (n_t,)."""
        return self.model.kinetic_energy(self.p)

    def potential_energy(self, element: str | None = None) -> np.ndarray:
        """V at each node: of the whole model, or of the spring, torsion spring or field
        ``element`` alone (e.g. the energy stored in one spring)."""
        if element is None:
            return self.model.potential_energy(self.q)
        if not isinstance(self.model, Model):
            raise ModelError("Solution.potential_energy(element) needs the compiled model: "
                             "load the file with mbs.load_solution(path, model=...)")
        return self.model.element_potential_energies(self.q, element)

    def __repr__(self) -> str:
        """One line: the solver, the step, the nodes and the model (the arrays are its
        attributes)."""
        stats = self.stats or {}
        stop = self._stop()
        return (f"{type(self).__name__}(solver={stats.get('solver')!r}, h={stats.get('h')}, "
                f"steps={self.t.size - 1}, t=[{_time_range(self.t[0], self.t[-1])}], "
                + ("" if stop is None else f"stopped early at t={stop}, ")
                + f"model={self.model!r})")

    def _stop(self) -> str | None:
        """None for a run that completed; otherwise where it stopped: the time of its last
        step (with its index in the run's numbering), which lies past the last node of a
        window ending earlier."""
        stats = self.stats or {}
        if stats.get("completed", True):
            return None
        last = int(stats.get("first_step", 0)) + self.t.size - 1
        done = stats.get("steps")
        h = stats.get("h")
        if (isinstance(done, (int, np.integer)) and done > last
                and isinstance(h, (int, float)) and np.isfinite(h)):
            return f"{self.t[-1] + (done - last) * h:.6g} (step {done})"
        return f"{self.t[-1]:.6g} (step {last})"

    def energy(self) -> np.ndarray:
        """Total energy at each node."""
        return self.kinetic_energy() + self.potential_energy()

    def linear_momentum(self) -> np.ndarray:
        """(N+1, 3)."""
        return self.model.linear_momentum(self.p)

    def angular_momentum(self, about=(0.0, 0.0, 0.0)) -> np.ndarray:
        """(N+1, 3) about the fixed point ``about``, or with ``about="com"`` about the
        system's centre of mass at each node (:meth:`centre_of_mass`): J_c = J_0 - x_c x L,
        kept by a free system under uniform gravity, which turns J_0."""
        if isinstance(about, str) and about == "com":
            return (self.model.angular_momentum(self.q, self.p)
                    - np.cross(self.centre_of_mass(), self.linear_momentum()))
        about = reference_point(about, "Solution.angular_momentum")
        return self.model.angular_momentum(self.q, self.p, about=about)

    def centre_of_mass(self) -> np.ndarray:
        """The system's centre of mass at the nodes, (N+1, 3): the bodies' centres (the
        position coordinates of rigid bodies and point masses) weighted by their masses."""
        bodies = self.model.bodies
        masses = np.array([body.mass for body in bodies])
        starts = np.array([body.coordinates.start for body in bodies])
        centres = self.q[:, starts[:, None] + np.arange(3)]  # (N+1, bodies, 3)
        return np.einsum("b,nbi->ni", masses, centres) / masses.sum()

    def constraint_residuals(self) -> dict[str, np.ndarray]:
        """Max-norm constraint residuals.

        Returns
        -------
        dict with "position" g(q_n) (N+1,), "velocity" G(q_n) M^-1 p_n (N+1,), and
        "enforced_position", "enforced_velocity" (N,): what the scheme itself enforces.
        """
        model = self.model
        if model.m == 0:
            zeros = np.zeros(self.t.size)
            return {"position": zeros, "velocity": zeros,
                    "enforced_position": zeros[1:], "enforced_velocity": zeros[1:]}
        if isinstance(model, Model):
            position, velocity = model.constraint_residual_norms(self.q, self.p, self.t)
        else:
            position = np.array([np.max(np.abs(model.constraints(q, t)))
                                 for q, t in zip(self.q, self.t)])
            velocity = np.array([np.max(np.abs(model.velocity_constraints(q, p, t)))
                                 for q, p, t in zip(self.q, self.p, self.t)])
        return {"position": position, "velocity": velocity,
                "enforced_position": self.enforced_residuals[:, 0],
                "enforced_velocity": self.enforced_residuals[:, 1]}

    # -- bodies and joints -------------------------------------------------------------------
    def joint(self, name: str | Element, coordinate: str | None = None) -> JointTrajectory:
        """Angle (revolute, cylindrical) or displacement (prismatic;
        ``coordinate="displacement"`` for a cylindrical joint's slide, as for
        :class:`~mbs.joints.Drive`) of joint ``name`` and its rate at the nodes. A universal
        joint has two angles: ``coordinate="angle_a"`` (the default) turns body_b's axis_b
        about body_a's axis_a, ``"angle_b"`` turns body_b about its axis_b; each rate is
        (omega_b - omega_a) . axis. Here and in the other accessors an element may be given
        as its name or itself."""
        name = element_name(name)
        position, rate = self.model.joint_coordinate_path(name, self.q, self.velocities,
                                                          coordinate)
        coordinate = coordinate or next(iter(self.model.joint_coordinates[name]))
        if is_angle(coordinate):
            turns = _whole_turns(position) + (self.stats.get("angle_turns") or {}).get(
                f"{name}.{coordinate}", 0.0)
            position = position + 2.0 * np.pi * turns
        return JointTrajectory(name, coordinate, position, rate, t=self.t)

    def drive(self, name: str | Element) -> DriveTrajectory:
        """The driven coordinate of drive ``name``, the reaction the drive exerts and its
        work."""
        name = element_name(name)
        drives = getattr(self.model, "drives", {})
        if name not in drives:
            raise UnknownNameError(f"no drive {name!r}; drives: {', '.join(drives) or 'none'}")
        joint, coordinate = drives[name]
        driven = self.joint(joint, coordinate)
        effort = -self._step_multipliers(self.model.constraint_rows[name][:1])[:, 0]
        work = np.concatenate([[0.0], np.cumsum(effort * np.diff(driven.position))])
        return DriveTrajectory(name, coordinate, driven.position, driven.rate, effort, work,
                               t=self.t)

    def _step_multipliers(self, rows: np.ndarray) -> np.ndarray:
        """The multipliers of ``rows`` as the mean constraint force of each step, (N, rows):
        the step's multipliers, the mean of those at its two ends (rattle, lobatto), or their
        centred average where they alternate (see :attr:`DriveTrajectory.effort`)."""
        values = self.multipliers[:, rows]
        rule = self.stats.get("drive_effort")
        if rule == "none":
            kept = getattr(self.solver_properties, "multiplier_times", None) or (
                "see multiplier_times in mbs.solvers.solver_table()")
            raise ModelError(f"solver {self.stats.get('solver')!r} keeps no constraint forces "
                             f"of its steps (its multipliers: {kept}); run em, rattle or "
                             f"lobatto in the director formulation for joint reactions and "
                             f"drive efforts")
        if rule == "mean":
            return 0.5 * (values + self.velocity_multipliers[:, rows])
        if rule == "centred":
            if "multiplier_context" not in self.stats:
                return _without_alternation(values)
            context, first = (self.stats["multiplier_context"],
                              int(self.stats["multiplier_context_row"]))
            return _without_alternation(context[:, rows])[first:first + values.shape[0]]
        return values

    def force(self, name: str | Element) -> ForceTrajectory:
        """The effort of load, damper, actuator or torsion spring ``name`` in each step and
        its work up to each node (cumulative, see :class:`ForceTrajectory`).

        A :class:`~mbs.forces.TorsionSpring`'s effort is its torque on body_b about the
        axis, -k (alpha_n + alpha_{n+1}) / 2 with alpha the angle from the rest angle as the
        spring reads it (within half a turn), so that its work in a step is -k (alpha_{n+1}^2
        - alpha_n^2) / 2, minus the change of its energy; with ``damping=`` its damper's
        effort and work are added. Two-point springs with ``damping=`` report their
        damper."""
        name = element_name(name)
        applied = getattr(self.model, "applied_forces", None)
        terms = [] if applied is None else [term for term in applied.terms
                                            if term.name == name]
        springs = {info.name: info for info in getattr(self.model, "forces", ())
                   if info.type == "TorsionSpring"}
        if name in springs:
            return self._torsion_spring(springs[name], self._applied_force(name, terms)
                                        if terms else None)
        if not terms:
            names = sorted({term.name for term in applied.terms}) if applied else []
            if name in getattr(self.model, "drives", {}):
                raise UnknownNameError(f"{name!r} is a drive: its effort and work are "
                                       f"Solution.drive({name!r})")
            names = sorted(set(names) | set(springs))
            raise UnknownNameError(f"no load, damper, actuator or torsion spring {name!r}; "
                                   f"this model's: {', '.join(names) or 'none'}")
        return self._applied_force(name, terms)

    def _applied_force(self, name: str, terms: list) -> ForceTrajectory:
        """:meth:`force` of the applied terms ``terms`` of element ``name``."""
        t, q = self.t, self.q
        steps = np.diff(t)
        middle, increments = 0.5 * (t[1:] + t[:-1]), np.diff(q, axis=0)
        midpoints = 0.5 * (q[1:] + q[:-1])
        work = np.zeros(steps.size)
        scalar = all(hasattr(term, "coordinate") for term in terms)  # Q = effort J(q)
        effort = np.zeros(steps.size) if scalar else None
        for term in terms:
            index = term.local.indices
            for k in range(steps.size):
                value = term.evaluate(middle[k], midpoints[k, index],
                                      increments[k, index] / steps[k], False)[0]
                work[k] += value @ increments[k, index]
                if effort is not None:
                    row = term.coordinate(midpoints[k, index])[1]
                    effort[k] += (value @ row) / (row @ row)
        return ForceTrajectory(name, middle, effort, np.concatenate([[0.0], np.cumsum(work)]),
                               work / steps)

    def _torsion_spring(self, info, damper: ForceTrajectory | None) -> ForceTrajectory:
        """:meth:`force` of a torsion spring (``info`` from ``model.forces``) and of its
        damper."""
        stiffness, rest = info.data["stiffness"], info.data.get("rest_angle", 0.0)
        angle = self.joint(info.data["joint"]).position
        wound = np.angle(np.exp(1j * (angle - rest)))  # as the spring reads it
        effort = -0.5 * stiffness * (wound[1:] + wound[:-1])
        work = -0.5 * stiffness * (wound**2 - wound[0] ** 2)
        if damper is not None:
            effort, work = effort + damper.effort, work + damper.work
        return ForceTrajectory(info.name, 0.5 * (self.t[1:] + self.t[:-1]), effort, work,
                               np.diff(work) / np.diff(self.t))

    def reaction(self, name: str | Element, body: str | Element | None = None, *,
                 about: str | np.ndarray | None = None, frame: str = "world"
                 ) -> ReactionTrajectory:
        """The force and torque joint ``name`` exerts on ``body`` (default: its second body,
        or its first when the second is the ground) in each step.

        ``about``: the point of the body the torque is taken about: its centre of mass
        (None, the default), the joint's point ("joint"; for a Distance joint the end on
        ``body``), or the body point that was at the given world coordinates at the initial
        pose (as for :meth:`point`). ``frame``: "world" (default) or "body", the components
        along the body's axes d_1, d_2, d_3 at the step's midpoint (a rigid body's only).
        About the joint's point and in the body's frame the torque is what a bearing there
        carries: about a hinge's axis it is zero.

        The joint's generalized constraint force -G(q)^T lambda, with lambda its
        multipliers as the mean force of the step (as for :meth:`drive`) and G at the step's
        midpoint configuration (q_n + q_{n+1}) / 2; the force is its part on the body's
        position, the torque sum_i d_i x f_i of its parts f_i on the directors d_i. Second
        order in h for the second-order schemes and their compositions, and also for
        lobatto and hbvm (their multipliers are second order); first for ggl-vi-s and
        ggl-vi-b; not available for vi-conversion, whose multipliers are no step forces. On a
        body spinning at a rate w the error is of order (h w)^2 times the force whatever the
        scheme's order, a step mean over a fast turn: on the bearing of a gyroscope rotor
        turned at a constant rate, about (h w)^2 / 8 for em and (h w)^2 / 6 for lobatto;
        rattle's mean of the forces at the step's two ends stays far below that (1e-4 of
        em's there).
        Where a loop has redundant constraint equations (``model.redundancies``), the joints
        that keep theirs carry the removed equations' share: such reactions are not unique
        (another choice of the removed equations, or a slightly different geometry, gives
        others with the same motion), and this method warns.
        """
        model, name = self.model, element_name(name)
        body = None if body is None else element_name(body)
        if not isinstance(model, Model):
            lie_group = (" (and a Lie-group run has no multipliers to compute it from: "
                         "run the model in the director formulation with em, rattle or "
                         "lobatto)" if self.stats.get("formulation") == "lie-group" else "")
            raise ModelError(f"Solution.reaction({name!r}): a solution loaded from a file "
                             f"without its model has no constraint code to evaluate the "
                             f"joint's constraint directions G(q){lie_group}; load the file "
                             f"with its compiled model: mbs.load_solution(path, model=...), "
                             f"e.g. model=build().compile() of the script that ran it")
        joints = {info.name: info for info in model.joints}
        if name not in joints:
            raise UnknownNameError(f"no joint {name!r}; joints: "
                                   f"{', '.join(joints) or 'none'}")
        moving = [b for b in joints[name].bodies if b in {info.name for info in model.bodies}]
        body = moving[-1] if body is None else body
        if body not in moving:
            if body in joints[name].bodies:  # the ground: no coordinates, no force rows
                raise ModelError(f"joint {name!r}: {body!r} has no coordinates; the reaction on "
                                 f"it is minus the one on {moving[-1]!r}")
            raise ModelError(f"joint {name!r} acts on {', '.join(joints[name].bodies)}, not on "
                             f"{body!r}")
        for redundancy in model.redundancies:
            if name in redundancy.joints:
                warn_user(f"Solution.reaction({name!r}): the loop of "
                          f"{', '.join(redundancy.joints)} has {redundancy.count} redundant "
                          f"constraint equation{'s' if redundancy.count > 1 else ''} "
                          f"(model.redundancies), so the reactions of its joints are not "
                          f"unique: the joints that keep their equations carry the share of "
                          f"the removed ones, and another choice or a slightly different "
                          f"geometry gives other reactions with the same motion; for unique "
                          f"reactions model the loop without redundancy (a spherical or "
                          f"universal joint in place of a revolute)")
        info = model.body(body)
        point = self._reaction_point(joints[name], body, about)
        if frame not in ("world", "body"):
            raise ModelError(f"Solution.reaction: frame must be 'world' or 'body', got "
                             f"{frame!r}")
        if frame == "body" and info.kind != "rigid":
            raise ModelError(f"Solution.reaction({name!r}): {body!r} is a point mass and has "
                             f"no body frame; use frame='world'")
        rows = model.constraint_rows[name]
        midpoints = 0.5 * (self.q[:-1] + self.q[1:])
        times = 0.5 * (self.t[:-1] + self.t[1:])
        generalized = -model.constraint_jacobian_transpose_products(
            midpoints, self._step_multipliers(rows), times, rows)[:, info.coordinates]
        force, torque = generalized[:, :3].copy(), np.zeros((times.size, 3))
        if info.kind != "rigid":  # a point mass: the force acts at it, about any point of it
            return ReactionTrajectory(name, body, times, force, torque)
        directors = midpoints[:, info.coordinates][:, 3:].reshape(-1, 3, 3)
        torque = np.cross(directors, generalized[:, 3:].reshape(-1, 3, 3)).sum(axis=1)
        if point is not None:  # T_P = T_com - (x_P - phi) x F at the midpoint configuration
            initial = model.q0[info.coordinates]
            local = initial[3:].reshape(3, 3) @ (point - initial[:3])
            torque -= np.cross(np.einsum("i,nic->nc", local, directors), force)
        if frame == "body":
            force = np.einsum("nic,nc->ni", directors, force)
            torque = np.einsum("nic,nc->ni", directors, torque)
        return ReactionTrajectory(name, body, times, force, torque)

    @staticmethod
    def _reaction_point(joint, body: str, about) -> np.ndarray | None:
        """The world point at the initial pose that :meth:`reaction`'s ``about`` names, or
        None for the centre of mass."""
        if about is None:
            return None
        if isinstance(about, str):
            if about != "joint":
                raise ModelError(f"Solution.reaction: about must be None, 'joint' or a point "
                                 f"(3 world coordinates), got {about!r}")
            key = ("point" if "point" in joint.data
                   else "point_a" if body == joint.bodies[0] else "point_b")
            if key not in joint.data and joint.type == "Distance":
                return None  # the distance's end on the body is its centre
            if key not in joint.data:
                raise ModelError(f"Solution.reaction: joint {joint.name!r} ({joint.type}) has "
                                 f"no point; give about as 3 world coordinates")
            return np.asarray(joint.data[key], dtype=float)
        point = np.asarray(about, dtype=float)
        if point.shape != (3,) or not np.all(np.isfinite(point)):
            raise ModelError(f"Solution.reaction: about must be None, 'joint' or 3 finite "
                             f"world coordinates, got {about!r}")
        return point

    def body(self, name: str | Element) -> BodyTrajectory:
        """Trajectory of body ``name``."""
        name = element_name(name)
        info = self.model.body(name)
        coords = self.q[:, info.coordinates]
        rates = self._velocities_of(info.coordinates)
        if info.kind == "point":
            return BodyTrajectory(name, coords.copy(), rates.copy(), t=self.t)
        directors = coords[:, 3:].reshape(-1, 3, 3)  # [step, i, component]
        director_rates = rates[:, 3:].reshape(-1, 3, 3)
        rotation = np.transpose(directors, (0, 2, 1))
        omega = 0.5 * np.cross(directors, director_rates).sum(axis=1)
        omega_body = np.einsum("nji,nj->ni", rotation, omega)
        return BodyTrajectory(name, coords[:, :3].copy(), rates[:, :3].copy(), rotation,
                              omega, omega_body, t=self.t)

    def point(self, body: str | Element, at) -> tuple[np.ndarray, np.ndarray]:
        """Position and velocity, (N+1, 3) each, of the point of ``body`` that was at ``at``
        (world coordinates) at the initial pose: the bodies' states when the model was
        compiled (``model.q0``), where the points of joints, springs and loads are given, so
        that a run from another state and any window of a run name the same body point; a
        point mass's are its own.

        The point is x = phi + sum_i X_i d_i with its body coordinates X_i = d_i . (at - phi)
        at the initial pose, and its velocity the same combination of the coordinates'
        velocities M^-1 p: exact in the director formulation, which needs no angular
        velocity."""
        info = self.model.body(element_name(body))
        at = np.asarray(at, dtype=float)
        if at.shape != (3,) or not np.all(np.isfinite(at)):
            raise ModelError(f"Solution.point: at must be 3 finite world coordinates, got "
                             f"{at!r}")
        coords = self.q[:, info.coordinates]
        rates = self._velocities_of(info.coordinates)
        if info.kind == "point":
            return coords.copy(), rates.copy()
        initial = self.model.q0[info.coordinates]
        directors = initial[3:].reshape(3, 3)  # rows d_i at the initial pose
        weights = np.concatenate([[1.0], directors @ (at - initial[:3])])  # (1, X_1, X_2, X_3)
        return (np.einsum("k,nkc->nc", weights, coords.reshape(-1, 4, 3)),
                np.einsum("k,nkc->nc", weights, rates.reshape(-1, 4, 3)))

    # -- summary --------------------------------------------------------------------------
    def _scheme_keeps(self, quantity: str) -> str:
        """"; <solver>: <how it keeps it>" for a ``quantity`` ("energy", "momentum") that
        the scheme conserves only approximately (its declared property), so that its error
        is not read as a fault; empty where it declares it exact."""
        kept = getattr(self.solver_properties, quantity, None)
        if not isinstance(kept, str) or kept in ("", "-") or kept.startswith("exact"):
            return ""  # exact, or not known (a file written without the properties)
        return f"; {self.stats.get('solver')}: {kept}"

    def _energy_line(self, energy: np.ndarray, scale: float) -> str:
        if not self.model.non_conservative:
            change = np.max(np.abs(energy - energy[0]))
            if scale == 0.0:  # E0 = 0 at rest throughout: nothing to divide by
                measure = f"max |E - E0| = {change:.3e} (E0 = 0 and no motion)"
            elif scale == abs(energy[0]):
                measure = f"max |E - E0| / |E0| = {change / scale:.3e}"
            else:  # E0 small against the motion (or zero): relative to the kinetic energy
                measure = (f"max |E - E0| / max T = {change / scale:.3e} (T kinetic energy, "
                           f"max T = {scale:.6g})")
            return (f"energy            E0 = {energy[0]:.12g}, {measure}  (conserved by "
                    f"this model{self._scheme_keeps('energy')})")
        work = self.work
        scale = max(scale, float(np.max(np.abs(work))))
        balance = float(np.max(np.abs(self.energy_balance())))
        measure = (f"max |E - E0 - W| / scale = {balance / scale:.3e}" if scale > 0.0 else
                   f"max |E - E0 - W| = {balance:.3e} (E0 = 0, no motion and no work)")
        return (f"energy balance    E0 = {energy[0]:.12g}, E_end - E0 = "
                f"{energy[-1] - energy[0]:.6g}, work of loads, dampers, motors and drives "
                f"W = {work[-1]:.6g}; {measure}")

    def conserved_directions(self, about=(0.0, 0.0, 0.0)
                             ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Orthonormal bases (rows, shapes (k, 3) and (j, 3)) of the directions along which
        the linear momentum, and about which (axes through ``about``) the angular momentum,
        is a first integral of the model: its potential, constraints and applied forces are
        invariant under that translation or rotation (:func:`mbs.symmetry.
        conserved_directions`, checked at states of this run and generic neighbours; where
        the run's scheme keeps momenta to round-off, a direction along which the momentum
        jumped in one step is not among them: a load acted between the checked states). They
        need not be world axes: under gravity along (0.6, 0, -0.8) the linear momentum is
        conserved in the plane normal to it. (None, None) for models in other
        coordinates."""
        about = reference_point(about, "Solution.conserved_directions")
        if not isinstance(self.model, Model):
            return None, None
        return self._directions(about, self._check_states())

    def _directions(self, about, states: list) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`conserved_directions` at the generic ``states`` of this run, without the
        directions along which a scheme that keeps momenta to round-off changed the momentum
        by a jump in one step (:data:`MISSED_BREAK_LEVEL`): something breaks it between the
        states the check samples (a contact load of a few steps, a load acting only where
        the scheme evaluates it, at the step midpoints)."""
        linear = conserved_directions(self.model, states, "translation")
        angular = conserved_directions(self.model, states, "rotation", about)
        if self.t.size < 2 or not self._keeps_momenta_exactly():
            return linear, angular  # the momentum's change is the scheme's error
        angular_scale, linear_scale = self._momentum_scales(about)
        return (_unbroken(linear, self.linear_momentum(), linear_scale),
                _unbroken(angular, self.angular_momentum(about), angular_scale))

    def conserved_momenta(self, about=(0.0, 0.0, 0.0)
                          ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Which components of the linear momentum (along x, y, z) and of the angular
        momentum about ``about`` (about the axes x, y, z through it) the model conserves:
        booleans, True where the axis lies among :meth:`conserved_directions`; None where that
        is not known (a solution loaded without its model, about a point its file holds no
        check for)."""
        linear, angular = self.conserved_directions(about)
        return tuple(None if directions is None else in_span(directions, np.eye(3))
                     for directions in (linear, angular))

    #: Candidate points tried by :meth:`conservation_summary` besides the origin.
    SUMMARY_POINTS = 6

    def _candidate_points(self) -> list[np.ndarray]:
        """Points the angular momentum is naturally taken about: the ground points of joints
        and forces (pivots, anchors of distance joints, springs and dampers) and the centres
        of central gravity, each once, the first :attr:`SUMMARY_POINTS` + 1; with user
        constraints or potentials (which name no point) first the points of the axes of the
        rotations that leave the model invariant (:func:`mbs.symmetry.symmetry_axis_points`)."""
        points, seen = [], set()
        if any(joint.type == "UserConstraint" for joint in self.model.joints) or any(
                force.type == "UserPotential" for force in self.model.forces):
            # user elements carry no points: the axes of the model's rotations, found
            points += symmetry_axis_points(self.model, self._check_states())
        for element in (*self.model.joints, *self.model.forces):
            if len(points) > self.SUMMARY_POINTS:  # the origin may be among them
                break
            data, bodies = element.data, tuple(element.bodies)
            found = [data.get("center")]
            if "ground" in bodies:
                found.append(data.get("point"))
                found += [data.get(key) for key, body in zip(("point_a", "point_b"), bodies)
                          if body == "ground"]
                if data.get("points") is not None and len(bodies) == 2:
                    found.append(data["points"][bodies.index("ground")])
            found += list(data.get("ground_points", ()))  # user potentials' anchors
            for point in found:
                if point is not None and tuple(np.ravel(point)) not in seen:
                    seen.add(tuple(np.ravel(point)))
                    points.append(np.asarray(point, dtype=float))
        return points

    def momentum_reference_point(self) -> np.ndarray:
        """The point :meth:`conservation_summary` (and :func:`mbs.plots.plot_momentum`) take
        the angular momentum about: the origin, or the first pivot, anchor or centre of
        central gravity about which the model conserves more of its components (a top
        pivoted away from the origin conserves its vertical component about the pivot
        only)."""
        return self._summary_point()[0].copy()

    def _summary_point(self) -> tuple[np.ndarray, tuple | None]:
        """The origin, or the first of :meth:`_candidate_points` about which more components
        of the angular momentum are conserved; with :meth:`conserved_directions` about it
        (None for models in other coordinates)."""
        origin = np.zeros(3)
        if not isinstance(self.model, Model):
            return origin, None
        states = self._check_states()
        candidates = [p for p in self._candidate_points() if not np.array_equal(p, origin)]
        best = None
        for point in [origin, *candidates[:self.SUMMARY_POINTS]]:
            directions = self._directions(point, states)
            if best is None or len(directions[1]) > len(best[1][1]):
                best = (point, directions)
        return best

    def _vertical(self) -> np.ndarray | None:
        return vertical_axis(self.model.gravity)

    def _symmetry_states(self, count: int = 8) -> list[tuple[float, np.ndarray, np.ndarray]]:
        """Up to ``count`` states (t, q, p) spread over the run, the initial one first."""
        index = np.unique(np.linspace(0, self.t.size - 1, min(count, self.t.size))
                          .round().astype(int))
        return [(float(self.t[k]), self.q[k], self.p[k]) for k in index]

    #: Nodes at which applied forces are checked for invariance besides the generic states:
    #: a load acting only in a window of the run must not escape the check.
    FORCE_CHECK_NODES = 128

    def _check_states(self) -> list[tuple[float, np.ndarray, np.ndarray]]:
        """The states of the invariance check: generic neighbours of states spread over the
        run (:func:`mbs.symmetry.generic_states`), and with applied forces
        :attr:`FORCE_CHECK_NODES` further nodes."""
        key = (id(self.model), id(self.q), id(self.p), self.t.size)
        cached = self.__dict__.get("_check_state_cache")
        if cached is not None and cached[0] == key:  # projections of neighbours cost most
            return cached[1]
        states = generic_states(self.model, self._symmetry_states())
        if self.model.has_applied_forces:
            states += self._symmetry_states(self.FORCE_CHECK_NODES)
        self.__dict__["_check_state_cache"] = (key, states)
        return states

    def _momentum_hints(self, angular: bool, about) -> list[str]:
        """The elements that usually break a momentum: named when the invariance check
        finds it is not conserved."""
        model = self.model
        grounded_joints = {joint.name for joint in model.joints if "ground" in joint.bodies}
        hints = []
        if grounded_joints:
            hints.append("joints to the ground")
        if model.gravity is not None and (not angular or self._gravity_turns(about)):
            hints.append("gravity")
        for force in model.forces:
            if force.type == "CentralGravity" and not (
                    angular and np.allclose(force.data.get("center"), about)):
                hints.append("central gravity" + (" about another centre" if angular else ""))
            if force.type == "UserPotential":
                hints.append("user potentials")
        if any(force.type == "Load" for force in model.forces):
            hints.append("loads")
        if any("ground" in force.bodies and force.type not in ("UniformGravity", "Load")
               for force in model.forces):
            hints.append("forces from the ground")
        if any(joint in grounded_joints for joint, _ in getattr(model, "drives", {}).values()):
            hints.append("drives against the ground")
        if any(joint.type == "UserConstraint" for joint in model.joints):
            hints.append("user constraints")
        return list(dict.fromkeys(hints))

    def _gravity_turns(self, about) -> bool:
        """Whether uniform gravity has a torque about ``about`` in this run: the centre of
        mass away from the vertical through it (a pendulum, a top about its pivot; not a
        wheel balanced on its axle)."""
        bodies = self.model.bodies
        masses = np.array([body.mass for body in bodies])
        starts = np.array([body.coordinates.start for body in bodies], dtype=int)
        gravity = np.asarray(self.model.gravity, dtype=float)
        for _, q, _ in self._symmetry_states():
            positions = q[starts[:, None] + np.arange(3)]
            arm = masses @ positions / masses.sum() - np.asarray(about, dtype=float)
            size = max(float(np.linalg.norm(arm)), float(np.abs(positions).max()), 1e-300)
            if np.linalg.norm(np.cross(arm, gravity)) > 1e-9 * np.linalg.norm(gravity) * size:
                return True
        return False

    def _momentum_note(self, conserved: bool | None, angular: bool, about=None,
                       lost: str | None = None, constant: bool = False) -> str:
        """Whether the momentum is conserved by this model (``lost``: the directions along
        which it is not, when it is along others), and which elements usually break it
        where it is not (``constant``: though it stayed constant in this run). ``conserved``
        comes from the invariance check of :mod:`mbs.symmetry`; None: not known (a solution
        loaded without its model, about a point the file holds no check for)."""
        if conserved is None:
            return ("  (not checked: a solution loaded without its model holds the check for "
                    "the points saved with it; load_solution(path, model=...) checks any)")
        hints = self._momentum_hints(angular, about)
        why = (", ".join(hints) if hints
               else "the potential, constraints or forces are not invariant")
        if not conserved:
            if constant:
                return f"  (constant in this run, though no symmetry of the model keeps it: {why})"
            return f"  (not conserved: {why})"
        scheme = self._scheme_keeps("momentum")
        kept = getattr(self.solver_properties, "momentum", "")
        if (not scheme and isinstance(kept, str) and "quadratic constraints" in kept
                and any(joint.type == "UserConstraint" for joint in self.model.joints)):
            scheme = (f"; {self.stats.get('solver')}: exactly only for quadratic "
                      f"constraints, not for user constraints of other forms")
        if lost is None:
            return f"  (conserved by this model{scheme})"
        return f"  (conserved; not {lost}: {why}{scheme})"

    def _momentum_line(self, label: str, symbol: str, values: np.ndarray,
                       directions: np.ndarray | None, angular: bool, about, scale: float
                       ) -> str:
        """The summary line of a momentum: its conserved components (all of them, or those
        along ``directions``, named; the angular momentum about the vertical is called
        vertical), their drift, and the note of :meth:`_momentum_note`."""
        conserved, lost = None, None
        if directions is not None:
            conserved = len(directions) > 0
            vertical = self._vertical()
            if (angular and vertical is not None and len(directions) == 1
                    and in_span(directions, vertical[None, :])[0]):
                label = "vertical " + label
                values = (values @ vertical)[:, None]
            elif 0 < len(directions) < 3:
                basis, names, lost = _named_directions(directions)
                label += f" along {names}"
                values = values @ basis.T
        drift, constant = self._drift(values, symbol, scale)
        line = (f"{label}  {symbol}0 = {np.array2string(values[0], precision=8)}, {drift}"
                if angular else f"{label}   {drift}")
        return line + self._momentum_note(conserved, angular, about, lost, constant)

    def _keeps_momenta_exactly(self) -> bool:
        """Whether the run's scheme keeps the momenta the model conserves to round-off."""
        return not self._scheme_keeps("momentum") and not (
            "quadratic constraints" in str(getattr(self.solver_properties, "momentum", ""))
            and any(joint.type == "UserConstraint" for joint in self.model.joints))

    @staticmethod
    def _drift(values: np.ndarray, symbol: str, scale: float) -> tuple[str, bool]:
        """max |X - X0| relative to max |X|, unless X is zero to round-off throughout:
        ``scale`` bounds the size of the terms X is summed from, so that |X| below
        :data:`ROUNDOFF_SIZE` times it is cancellation, not a momentum. With whether X
        stayed constant to that round-off."""
        change = float(np.max(np.linalg.norm(values - values[0], axis=1)))
        size = float(np.max(np.linalg.norm(values, axis=1)))
        constant = change <= ROUNDOFF_SIZE * scale
        if size <= ROUNDOFF_SIZE * scale:
            return (f"{symbol} = 0 throughout (to round-off: max |{symbol}| = {size:.1e} of "
                    f"terms up to {scale:.1e})" if size > 0.0 else f"{symbol} = 0 throughout",
                    constant)
        return f"max |{symbol} - {symbol}0| / max |{symbol}| = {change / size:.3e}", constant

    def _momentum_scales(self, about) -> tuple[float, float]:
        """Upper bounds of the terms the angular and linear momenta are summed from: the
        largest sums over the coordinate triples of (|x| + |about|) |p| and of |p|."""
        steps = self.q.shape[0]
        position = np.linalg.norm(self.q.reshape(steps, -1, 3), axis=2)
        momentum = np.linalg.norm(self.p.reshape(steps, -1, 3), axis=2)
        lever = position + float(np.linalg.norm(np.asarray(about, dtype=float)))
        return (float(np.max((lever * momentum).sum(axis=1))),
                float(np.max(momentum.sum(axis=1))))

    def conservation_summary(self, about=None) -> str:
        """Drifts of energy and momenta, each labelled conserved or not by this model (and
        why not), and the worst constraint residuals. Drifts are relative to the size of
        the quantity, absolute where it is zero throughout.

        ``about`` is the point the angular momentum is taken about. By default the origin,
        or a ground point of a joint or force, or a centre of central gravity, about which
        the model conserves more of it (the pivot of a top placed away from the origin, the
        anchor of a pendulum's rod or of a spring); the line names a point other than the
        origin.

        Where only some directions are conserved (:meth:`conserved_directions`), the line
        names them ("along x, y", "along (0.7071, 0.7071, 0)") and prints the components and
        the drift along them only; a momentum that no symmetry conserves but that stayed
        constant to round-off in this run says so."""
        momenta = None
        if about is None:
            about, momenta = self._summary_point()
        about = reference_point(about, "Solution.conservation_summary")
        energy = self.energy()
        kinetic = float(np.max(np.abs(self.kinetic_energy())))
        # |E0|, unless it is small against the motion (a zero of the potential chosen near
        # the path): then the largest kinetic energy
        scale = abs(energy[0]) if abs(energy[0]) >= 0.5 * kinetic else kinetic
        label = "angular momentum"
        if np.any(np.asarray(about, dtype=float) != 0.0):
            label += f" about {np.array2string(np.asarray(about, dtype=float))}"
        linear_kept, angular_kept = (self.conserved_directions(about) if momenta is None
                                     else momenta)
        angular_scale, linear_scale = self._momentum_scales(about)
        res = self.constraint_residuals()
        props = self.solver_properties
        resumed = (f" (resumed at step {self.stats['resumed_at']})"
                   if "resumed_at" in self.stats else "")
        iterations = np.asarray(self.stats.get("newton_iterations", ()))
        sub_steps = self.stats.get("sub_steps", 1)
        wall_time = self.stats.get("wall_time")
        stop = self._stop()
        lines = [
            ("" if stop is None else f"stopped early: the run ended at t = {stop}  ")
            + f"solver {self.stats.get('solver')}  h = {self.stats.get('h')}  steps = "
            f"{self.t.size - 1}  t = [{_time_range(self.t[0], self.t[-1])}]"
            + ("" if wall_time is None else f"  wall time {wall_time:.3f} s") + resumed
            + (f"  mean Newton iterations {iterations.mean():.2f}" if iterations.size
               else "")
            + (f" per step (over its {sub_steps} sub-steps)" if iterations.size
               and sub_steps > 1 else "")]
        if self.t.size == 1:  # a run that failed in its first step, or a window of one node
            node = int(self.stats.get("first_step", 0))
            return "\n".join(lines + [
                ("no steps taken: the initial state only" if node == 0 else
                 f"a single node, node {node} of the run")
                + f" (E0 = {energy[0]:.12g}, |g(q_0)| = "
                f"{np.max(res['position']):.3e}, |G M^-1 p_0| = "
                f"{np.max(res['velocity']):.3e})"])
        lines += [
            self._energy_line(energy, scale),
            self._momentum_line(label, "J", self.angular_momentum(about), angular_kept, True,
                                about, angular_scale),
            self._momentum_line("linear momentum", "L", self.linear_momentum(), linear_kept,
                                False, about, linear_scale),
            f"constraints       max |g(q_n)| = {np.max(res['position']):.3e}, max |G M^-1 "
            f"p_n| = {np.max(res['velocity']):.3e}",
            f"scheme enforces   {getattr(props, 'constraints_at_step_end', '?')}: max "
            f"{np.max(res['enforced_position'], initial=0):.3e} (position), "
            f"{np.max(res['enforced_velocity'], initial=0):.3e} (velocity)",
        ]
        if (isinstance(self.model, Model) and self.model.m and self.t.size > 1
                and not getattr(props, "nodes_meet_constraints", True)):
            drift = float(np.max(res["velocity"]))
            scale = velocity_term_scale(self)
            # below round-off of the velocities a run of this length scale and step has (a
            # mechanism at rest), the ratio is one of round-off errors
            floor = ROUNDOFF_SIZE * max(scale, self.model.length_scale
                                        / float(self.stats.get("h") or 1.0))
            relative = drift / scale if scale > 0.0 else np.inf
            if drift > floor and relative > VELOCITY_DRIFT_LEVEL:
                lines.append(
                    f"node velocities   off the velocity constraints by {relative:.2g} of the "
                    f"size of G M^-1 p's terms ({drift:.3g}): velocities, joint rates and "
                    f"kinetic energy read from the nodes carry that error, which the energy "
                    f"line does not show; a smaller h, or a scheme enforcing both levels at "
                    f"the step ends, removes it")
        return "\n".join(lines)


def velocity_term_scale(solution: Solution) -> float:
    """The size of the terms G M^-1 p (+ dg/dt) sums, max_i sum_j |G_ij v_j| (+ |dg_i/dt|),
    over :data:`VELOCITY_CHECK_NODES` nodes of ``solution`` (evenly spaced, the last
    included: the node velocities of the schemes that leave the velocity constraints drift
    smoothly, and so do these terms). A residual of this size means node velocities wrong
    along the constrained directions by their own size."""
    model = solution.model
    nodes = np.unique(np.linspace(0, solution.t.size - 1,
                                  min(VELOCITY_CHECK_NODES, solution.t.size)).astype(int))
    scale = 0.0
    for k in nodes:
        q, t = solution.q[k], solution.t[k]
        terms = abs(model.constraint_jacobian(q, t)) @ np.abs(
            model.apply_inverse_mass(solution.p[k]))
        if model.is_rheonomic:
            terms = terms + np.abs(model.constraint_time_derivative(q, t))
        scale = max(scale, float(np.max(terms, initial=0.0)))
    return scale


def _unbroken(directions: np.ndarray, values: np.ndarray, scale: float) -> np.ndarray:
    """The part of the span of ``directions`` (orthonormal rows) along which the momentum
    ``values`` (one row per node) never changes by more than :data:`MISSED_BREAK_LEVEL`
    times ``scale`` in one step: the directions of the jumps, the eigenvectors of the Gram
    matrix of the steps' changes (k x k, k <= 3, whatever the run's length), dropped where a
    change along them is that large."""
    if len(directions) == 0:
        return directions
    changes = np.diff(values, axis=0) @ directions.T
    limit = MISSED_BREAK_LEVEL * scale
    if not np.max(np.abs(changes)) > limit:
        return directions
    _, axes = np.linalg.eigh(changes.T @ changes)  # (k, k), k <= 3: whatever the run length
    return axes[:, np.max(np.abs(changes @ axes), axis=0) <= limit].T @ directions


def element_name(element: str | Element) -> str:
    """The name of a body, joint or force given by its name, as the element itself or as
    its entry of the compiled model (``model.bodies[k]``)."""
    if isinstance(element, str):
        return element
    name = getattr(element, "name", None)
    if isinstance(name, str):
        return name
    raise ModelTypeError(f"expected an element or its name, got {element!r:.80}")


def reference_point(about, owner: str) -> np.ndarray:
    """``about``, the point an angular momentum is taken about, as 3 finite coordinates;
    anything else is refused naming ``owner``, the function it was given to."""
    return as_vector(about, 3, "about (the point the angular momentum is taken about)",
                     owner)


def _oriented(vector: np.ndarray) -> np.ndarray:
    """The unit vector or its opposite, whichever has its largest component positive."""
    return vector if vector[np.argmax(np.abs(vector))] > 0.0 else -vector


def _direction_text(vector: np.ndarray) -> str:
    """``y`` for a world axis, ``(0.6, 0, -0.8)`` for other unit vectors."""
    for name, axis in zip("xyz", np.eye(3)):
        if np.linalg.norm(vector - axis) <= 1e-9:
            return name
    return "(" + ", ".join(f"{value:.4g}" if abs(value) > 1e-12 else "0"
                           for value in vector) + ")"


def _named_directions(directions: np.ndarray) -> tuple[np.ndarray, str, str]:
    """(basis, names, lost) of a conserved subspace of dimension 1 or 2: the basis the
    components are printed in (rows, each with its largest component positive), its names
    ("x, y", "(0.7071, 0.7071, 0)", "y, (0.8, 0, 0.6)") and the directions not conserved.
    World axes are used where they span the subspace; a plane gets the world axis closest
    to it (projected onto it) and the direction normal to that in the plane."""
    names = np.array(["x", "y", "z"])
    inside = in_span(directions, np.eye(3))
    if inside.sum() == len(directions):
        return (np.eye(3)[inside], ", ".join(names[inside]),
                "along " + ", ".join(names[~inside]))
    if len(directions) == 1:
        vector = _oriented(directions[0])
        return vector[None, :], _direction_text(vector), "perpendicular to it"
    normal = _oriented(np.cross(directions[0], directions[1]))
    closest = int(np.argmin(np.abs(normal)))
    first = np.eye(3)[closest] - normal[closest] * normal
    first = _oriented(first / np.linalg.norm(first))
    second = _oriented(np.cross(normal, first))
    return (np.array([first, second]),
            f"{_direction_text(first)}, {_direction_text(second)}",
            f"along {_direction_text(normal)}")

def _without_alternation(values: np.ndarray) -> np.ndarray:
    """The centred average (v_{n-1} + 2 v_n + v_{n+1}) / 4 of a sequence along the steps:
    zero response to a component alternating in sign from step to step, an O(h^2) change of
    a smooth one. The two end values are extrapolated linearly from the two averages next
    to them (sequences of fewer than four values get the mean of neighbouring pairs)."""
    out = np.array(values, dtype=float)
    if out.shape[0] < 2:
        return out
    if out.shape[0] < 4:
        pairs = 0.5 * (out[:-1] + out[1:])
        return np.concatenate([pairs[:1], 0.5 * (pairs[:-1] + pairs[1:]), pairs[-1:]])
    out[1:-1] = 0.25 * (values[:-2] + 2.0 * values[1:-1] + values[2:])
    out[0] = 2.0 * out[1] - out[2]
    out[-1] = 2.0 * out[-2] - out[-3]
    return out


def _whole_turns(angles: np.ndarray) -> np.ndarray:
    """The whole turns (integers held as floats) to add to ``angles`` in (-pi, pi] for a
    continuous angle, 0 at the first: minus the nearest whole turn of each step's jump, as
    np.unwrap does, but summed as integers, so that the turns at a node are the same
    whether counted from the run's first node or continued from a window's."""
    jumps = np.rint(np.diff(angles) / (2.0 * np.pi))
    return np.concatenate([[0.0], -np.cumsum(jumps)])


def _time_range(start: float, end: float) -> str:
    """"start, end" with :g, or with as many significant digits as tell them apart (a run
    at t = 1e6 prints 1000000, 1000000.5, not 1e+06 twice)."""
    for digits in range(6, 18):
        first, last = f"{start:.{digits}g}", f"{end:.{digits}g}"
        if first != last or start == end:
            return f"{first}, {last}"
    return f"{start!r}, {end!r}"


def _node_derivatives(t: np.ndarray, values: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """d values / dt at ``nodes`` (indices into t), (nodes, n): the derivative of the
    polynomial through five neighbouring nodes (centred where the run allows, one-sided at
    its ends; all nodes of a run of fewer), fourth order on smooth data."""
    width = min(5, t.size)
    starts = np.clip(nodes - width // 2, 0, t.size - width)
    stencil = starts[:, None] + np.arange(width)  # (nodes, width)
    x = t[stencil] - t[nodes][:, None]  # the stencil's times relative to the node
    weights = np.empty_like(x)
    for j in range(width):
        # l_j'(0) of the Lagrange basis: sum over m != j of prod_{i != j, m} (0 - x_i) over
        # prod_{i != j} (x_j - x_i)
        others = [i for i in range(width) if i != j]
        denominator = np.prod([x[:, j] - x[:, i] for i in others], axis=0)
        numerator = np.zeros(nodes.size)
        for m in others:
            numerator += np.prod([-x[:, i] for i in others if i != m], axis=0)
        weights[:, j] = numerator / denominator
    return np.einsum("kj,kjn->kn", weights, values[stencil])


def _hermite(t: np.ndarray, values: np.ndarray, slopes: np.ndarray, step: np.ndarray,
             left: np.ndarray, right: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The cubic Hermite interpolant of ``values`` at the nodes with derivatives ``slopes``
    (rows ``left`` and ``right`` for each step's two ends) at ``times`` inside ``step``."""
    h = (t[step + 1] - t[step])[:, None]
    s = (times - t[step])[:, None] / h
    return ((1.0 + 2.0 * s) * (1.0 - s) ** 2 * values[step]
            + s * (1.0 - s) ** 2 * h * slopes[left]
            + s * s * (3.0 - 2.0 * s) * values[step + 1]
            + s * s * (s - 1.0) * h * slopes[right])
