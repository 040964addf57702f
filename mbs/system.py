"""The user-facing mechanism description: a graph of bodies, joints and forces."""

from __future__ import annotations

import difflib

import networkx as nx
import numpy as np

from mbs.bodies.base import Body, Ground
from mbs.elements import Element
from mbs.errors import ModelError, ModelTypeError, UnknownNameError
from mbs.forces.base import Force
from mbs.forces.gravity import UniformGravity
from mbs.joints.base import Joint
from mbs.joints.user import UserConstraint
from mbs.model import Model
from mbs.validation import as_vector


class System:
    """A mechanism under construction.

    Parameters
    ----------
    gravity : array_like (3,) or None
        Uniform gravitational acceleration acting on every body, e.g. (0, 0, -9.81);
        None switches it off.
    redundant : {"remove", "keep"}
        What ``compile()`` does with redundant joint equations (a rank-deficient constraint
        Jacobian at the initial state, e.g. a planar four-bar built from 3-D revolute joints):
        "remove" (default) drops a dependent subset, with a warning naming them, so that
        the solvers' Newton matrices stay regular; the subset is chosen so that the other
        equations stay regular along the motions the joints allow from the initial state
        (:func:`mbs.analysis.analyse_rank`); "keep" keeps every equation (the
        saddle-point matrices are then singular).

    Examples
    --------
    >>> import mbs
    >>> system = mbs.System(gravity=(0.0, 0.0, -9.81))
    >>> bob = system.add(mbs.PointMass(mass=1.0, name="bob"))
    >>> _ = bob.set_state(position=(1, 0, 0), velocity=(0, 1, 0))
    >>> _ = system.add(mbs.joints.Distance(system.ground, bob, length=1.0))
    >>> system.compile().degrees_of_freedom
    2
    """

    def __init__(self, gravity=None, redundant: str = "remove"):
        self._names: dict[str, Element] = {}
        self._next_default: dict[str, int] = {}
        self.gravity = gravity
        if redundant not in ("remove", "keep"):
            raise ModelError(f"System: redundant must be 'remove' or 'keep', got "
                             f"{redundant!r}")
        self.redundant = redundant
        self.ground = Ground()
        self.ground.system = self
        self.bodies: list[Body] = []
        self.joints: list[Joint] = []
        self.user_constraints: list[UserConstraint] = []
        self._forces: list[Force] = []
        self._names[self.ground.name] = self.ground

    @property
    def gravity(self) -> np.ndarray | None:
        """The uniform gravitational acceleration (3,), or None; may be set after elements
        were added (it then becomes the element named "gravity")."""
        return self._gravity

    @gravity.setter
    def gravity(self, value) -> None:
        vector = None if value is None else as_vector(value, 3, "gravity", "System")
        if vector is not None and "gravity" in self._names:
            raise ModelError("System.gravity: the name 'gravity', which the system's uniform "
                             "gravity takes, belongs to another element; rename it first")
        self._gravity = vector

    # -- building -------------------------------------------------------------------------
    def add(self, element: Element) -> Element:
        """Add a body, joint, force or user constraint; returns it for chaining."""
        if not isinstance(element, Element) or isinstance(element, Ground):
            raise ModelTypeError(f"System.add expects a body, joint, force or constraint, got "
                                 f"{element!r}")
        if element.system is not None:
            where = "this system" if element.system is self else "another system"
            raise ModelError(f"{element!r} is already part of {where}; create a new element")
        if not getattr(element, "name_given", True):
            # the first free "<kind><k>": names are never removed, so every k below the
            # kind's counter (advanced when an element is stored) is taken and the search
            # resumes there (no quadratic cost)
            k = self._next_default.get(element.kind, 1)
            while f"{element.kind}{k}" in self._names:
                k += 1
            element.name = f"{element.kind}{k}"
        if element.name == "gravity" and self.gravity is not None:
            raise ModelError("the name 'gravity' is taken by the system's uniform gravity; "
                             "choose another name")
        if element.name in self._names:
            raise ModelError(f"duplicate name {element.name!r}: every body, joint and force "
                             f"of a system needs a unique name")
        # joint actuators, dampers and drives (joint), JointEfforts (joints)
        for joint in [getattr(element, "joint", None), *getattr(element, "joints", ())]:
            if isinstance(joint, Joint) and joint.system is not self:
                fix = ("is not in a system; add the joint first" if joint.system is None else
                       "belongs to another system; give a joint of this system")
                raise ModelError(f"{type(element).__name__} {element.name!r}: joint "
                                 f"{joint.name!r} {fix}")
        for body in self._referenced_bodies(element):
            if body.system is not self:
                raise ModelError(
                    f"{type(element).__name__} {element.name!r} references body "
                    f"{body.name!r}, which is not in this system; add the body first")
        if isinstance(element, Body):
            self.bodies.append(element)
        elif isinstance(element, Joint):
            self.joints.append(element)
        elif isinstance(element, UserConstraint):
            self.user_constraints.append(element)
        elif isinstance(element, Force):
            self._forces.append(element)
        else:
            raise ModelTypeError(f"System.add: unsupported element {element!r}")
        element.system = self
        self._names[element.name] = element
        if not getattr(element, "name_given", True):
            self._next_default[element.kind] = int(element.name[len(element.kind):]) + 1
        return element

    @staticmethod
    def _referenced_bodies(element: Element) -> list[Body]:
        if isinstance(element, Joint):
            return list(element.bodies)
        if isinstance(element, UserConstraint):
            referenced = getattr(element, "referenced_bodies", None)  # drives check their joint
            return referenced() if referenced is not None else list(element.bodies)
        if isinstance(element, Force):
            listed = element.referenced_bodies()
            for body in listed:
                if not isinstance(body, Body):
                    raise ModelTypeError(f"{type(element).__name__} {element.name!r}: "
                                         f"{body!r} is not a body")
            return listed
        return []

    def __getitem__(self, name: str) -> Element:
        try:
            return self._names[name]
        except KeyError:
            close = difflib.get_close_matches(str(name), [str(n) for n in self._names], n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else (
                f"; the system has {sorted(map(str, self._names))[:20]}")
            raise UnknownNameError(f"no element named {name!r}{hint}") from None

    @property
    def drives(self) -> list[UserConstraint]:
        """The drives among the user constraints: those that depend on time."""
        return [c for c in self.user_constraints if getattr(c, "time_dependent", False)]

    @property
    def forces(self) -> list[Force]:
        """User forces plus the uniform gravity of the system (if any)."""
        if self.gravity is None:
            return list(self._forces)
        gravity = UniformGravity(self.gravity, name="gravity")
        gravity.system = self
        return [gravity] + self._forces

    # -- structure ------------------------------------------------------------------------
    @property
    def graph(self) -> nx.MultiGraph:
        """Bodies (and the ground) as nodes, joints and forces as edges keyed by name.

        Field forces (uniform or central gravity) appear as edges from the ground to each
        body they act on; a user constraint on several bodies as edges between each pair
        (kind "joint"); a drive as an edge of kind "drive" between its joint's two bodies,
        which its joint already connects (it closes no loop).
        """
        graph = nx.MultiGraph()
        graph.add_node(self.ground.name, element=self.ground)
        for body in self.bodies:
            graph.add_node(body.name, element=body)
        for joint in self.joints:
            graph.add_edge(joint.body_a.name, joint.body_b.name, key=joint.name,
                           element=joint, kind="joint")
        drives = self.drives
        for constraint in self.user_constraints:
            names = [b.name for b in constraint.bodies]
            kind = "drive" if constraint in drives else "joint"
            for i, a in enumerate(names):
                for b in names[i + 1:]:
                    graph.add_edge(a, b, key=constraint.name, element=constraint, kind=kind)
        for force in self.forces:
            acted = force.bodies_acted_on()
            pairs = ([(self.ground.name, b.name) for b in acted] if force.is_field
                     else [(a.name, b.name) for i, a in enumerate(acted) for b in acted[i + 1:]])
            for a, b in pairs:
                graph.add_edge(a, b, key=force.name, element=force, kind="force")
        return graph

    def _joint_graph(self) -> nx.MultiGraph:
        graph = self.graph
        joint_edges = [(a, b, k) for a, b, k, d in graph.edges(keys=True, data=True)
                       if d["kind"] == "joint"]
        out = nx.MultiGraph()
        out.add_nodes_from(graph.nodes)
        out.add_edges_from(joint_edges)
        return out

    def kinematic_loops(self) -> list[list[str]]:
        """Independent closed loops of the joint graph (cycle basis; parallel joints between
        the same two bodies count as loops too)."""
        multi = self._joint_graph()
        simple = nx.Graph(multi)
        loops = [list(c) for c in nx.cycle_basis(simple)]
        for a, b in simple.edges:
            extra = multi.number_of_edges(a, b) - 1
            loops.extend([[a, b]] * extra)
        return loops

    def floating_bodies(self) -> list[str]:
        """Bodies not connected to the ground through joints."""
        joints = self._joint_graph()
        grounded = nx.node_connected_component(joints, self.ground.name)
        return [b.name for b in self.bodies if b.name not in grounded]

    def unconnected_bodies(self) -> list[str]:
        """Bodies that no joint or force touches."""
        graph = self.graph
        return [b.name for b in self.bodies if graph.degree(b.name) == 0]

    def compile(self, formulation: str = "director") -> Model:
        """Turn the system into a :class:`~mbs.model.Model` for the solvers.

        ``formulation="lie-group"`` returns a :class:`mbs.liegroup.LieGroupModel` instead
        (rigid bodies on SO(3) x R^3, for ``solver="vrkmk"`` / ``"vcg"``; see
        :func:`mbs.liegroup.compile_lie_group` for what it supports).
        """
        from mbs.compiler import compile_system

        if not self.bodies:
            raise ModelError("the system has no bodies; add a RigidBody or PointMass first")
        if formulation != "director":
            from mbs.liegroup.model import compile_formulation

            return compile_formulation(self, formulation)
        return compile_system(self)

    def summary(self, model: Model | None = None, print_it: bool = True) -> str:
        """Bodies, joints, coordinates, constraints, degrees of freedom, redundant
        constraints, floating bodies and kinematic loops; printed and returned."""
        model = self.compile() if model is None else model
        if [body.name for body in model.bodies] != [body.name for body in self.bodies]:
            raise ModelError("System.summary: the model was not compiled from this system (its "
                             "bodies differ); pass this system's model, or none to compile it")
        drives = self.drives
        others = [c for c in self.user_constraints if c not in drives]
        counts = [_count(self.bodies, "body", "bodies"), _count(self.joints, "joint")]
        counts += [_count(items, noun) for items, noun in
                   ((drives, "drive"), (others, "user constraint")) if items]
        lines = [f"System with {', '.join(counts)}, {_count(self.forces, 'force')}"]
        for body in self.bodies:
            info = model.body(body.name)
            lines.append(f"  body  {body.name:<16} {type(body).__name__:<10} m = "
                         f"{body.mass:.6g}  q[{info.coordinates.start}:"
                         f"{info.coordinates.stop}]")
        rows = model.constraint_rows
        removed = [name for red in model.redundancies for name, _ in red.removed]
        for joint in self.joints + self.user_constraints:
            names = " - ".join(b.name for b in joint.bodies)
            kind = ("joint" if joint in self.joints else "drive" if joint in drives
                    else "user ")
            equations = _count(rows[joint.name], "equation")
            dropped = removed.count(joint.name)
            if dropped:
                equations += f", {dropped} more removed as redundant"
            lines.append(f"  {kind} {joint.name:<16} {type(joint).__name__:<12} {names}  "
                         f"({equations})")
        for force in self.forces:
            names = ", ".join(b.name for b in force.bodies_acted_on())
            lines.append(f"  force {force.name:<16} {type(force).__name__:<14} on {names}")
        lines.append(f"coordinates n = {model.n}, constraints m = {model.m}, degrees of "
                     f"freedom = {model.degrees_of_freedom} (n - rank G at the initial state)")
        if model.redundancies:
            for red in model.redundancies:
                state = "consistent" if red.consistent else "INCONSISTENT"
                dropped = (f", removed {', '.join(red.removed_labels)}"
                           if self.redundant == "remove" else ", kept")
                lines.append(f"redundant: {red.count} equation(s) among joints "
                             f"{', '.join(red.joints)} ({state}{dropped})")
        else:
            lines.append("redundant constraints: none")
        floating = self.floating_bodies()
        lines.append(f"floating bodies (not jointed to ground): "
                     f"{', '.join(floating) if floating else 'none'}")
        loops = self.kinematic_loops()
        lines.append(f"kinematic loops: {len(loops)}"
                     + "".join(f"\n  loop: {' - '.join(loop)}" for loop in loops))
        lines.extend(f"note: {note}" for note in model.notes)
        g, gv = model.initial_residuals()
        lines.append(f"initial residuals: max |g| = {g:.3e}, max |G M^-1 p| = {gv:.3e}")
        text = "\n".join(lines)
        if print_it:
            print(text)
        return text

    def __repr__(self) -> str:
        return (f"System(bodies={len(self.bodies)}, joints={len(self.joints)}, "
                f"forces={len(self.forces)})")


def _count(items, singular: str, plural: str | None = None) -> str:
    """'1 body', '2 bodies': the number of ``items`` with the noun in its number."""
    return f"{len(items)} {singular if len(items) == 1 else plural or singular + 's'}"

