"""Save a System (bodies, joints, forces, initial state, names) as JSON and load it back.

The file records constructor arguments and initial states only (no derived data), so loading
and compiling reproduces the same Model and, with the same solver, bitwise the same simulation.
Elements holding Python callables (UserConstraint, UserPotential, Drive, loads and actuators
given as functions) cannot be written; constant loads and actuators and every damper can.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from mbs.bodies import PointMass, RigidBody
from mbs.errors import MbsError, ModelError
from mbs.forces import (
    CentralGravity,
    Damper,
    JointDamper,
    JointForce,
    JointTorque,
    Load,
    QuarticSpring,
    Spring,
    TorsionSpring,
    UniformGravity,
)
from mbs.joints import Cylindrical, Distance, Prismatic, Revolute, Rigid, Spherical, Universal
from mbs.safe_files import load_json, read_text
from mbs.system import System

FORMAT = "mbs-model"
#: Largest model file read (a model with 10^5 bodies takes a few MB).
MAX_MODEL_BYTES = 256 * 2**20
VERSION = 1

_JOINT_ARGS = {
    Spherical: ("point",),
    Distance: ("length", "point_a", "point_b"),
    Revolute: ("point", "axis", "damping"),
    Cylindrical: ("point", "axis", "damping"),
    Prismatic: ("point", "axis", "damping"),
    Rigid: ("point", "axis"),
    Universal: ("point", "axis_a", "axis_b"),
}
_FORCE_ARGS = {
    Spring: ("stiffness", "rest_length", "point_a", "point_b", "damping"),
    QuarticSpring: ("stiffness", "length", "point_a", "point_b"),
    Damper: ("damping", "point_a", "point_b"),
}
#: Actuators on a joint: the attribute holding their constant value.
_JOINT_EFFORTS = {JointTorque: "torque", JointForce: "force", JointDamper: "damping"}
#: Springs on a joint: their constructor arguments after the joint.
_JOINT_SPRINGS = {TorsionSpring: ("stiffness", "rest_angle", "damping")}
_BODY_FIELDS = {"RigidBody": ("mass", "inertia", "shape", "state"),
                "PointMass": ("mass", "radius", "state")}
_BY_NAME = {cls.__name__: cls for cls in (*_JOINT_ARGS, *_FORCE_ARGS, *_JOINT_EFFORTS,
                                          *_JOINT_SPRINGS, Load, CentralGravity,
                                          UniformGravity)}


def _constant(value, owner: str, what: str):
    """The constant of a load or actuator value (see :mod:`mbs.forces.applied`), None if
    absent; functions cannot be written."""
    if value is None:
        return None
    constant = getattr(value, "constant", value)
    if getattr(value, "function", None) is not None or constant is None:
        raise ModelError(f"{owner}: its {what} is a Python function and cannot be saved to "
                         f"JSON")
    return _plain(constant)


def _plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.floating):
        return float(value)
    return value


def system_to_dict(system: System) -> dict:
    """JSON-ready description of ``system``."""
    bodies = []
    for body in system.bodies:
        if isinstance(body, RigidBody):
            bodies.append({
                "type": "RigidBody", "name": body.name, "mass": body.mass,
                "inertia": body.inertia.tolist(), "shape": body.shape,
                "state": {"position": body.position.tolist(),
                          "rotation": body.rotation.tolist(),
                          "velocity": body.velocity.tolist(),
                          "angular_velocity": body.angular_velocity.tolist()}})
        else:
            bodies.append({"type": "PointMass", "name": body.name, "mass": body.mass,
                           "radius": body.radius,
                           "state": {"position": body.position.tolist(),
                                     "velocity": body.velocity.tolist()}})
    joints = []
    for joint in system.joints:
        args = _JOINT_ARGS.get(type(joint))
        if args is None:
            raise ModelError(f"joint {joint.name!r} of type {type(joint).__name__} cannot be "
                             f"saved to JSON")
        joints.append({"type": type(joint).__name__, "name": joint.name,
                       "body_a": joint.body_a.name, "body_b": joint.body_b.name,
                       **{k: _plain(getattr(joint, k)) for k in args}})
    for constraint in system.user_constraints:
        raise ModelError(f"{type(constraint).__name__} {constraint.name!r} holds Python "
                         f"functions and cannot be saved to JSON")
    forces = []
    for force in system._forces:
        entry = {"type": type(force).__name__, "name": force.name}
        if type(force) in _FORCE_ARGS:
            entry.update(body_a=force.body_a.name, body_b=force.body_b.name,
                         **{k: _plain(getattr(force, k)) for k in _FORCE_ARGS[type(force)]})
        elif type(force) in _JOINT_EFFORTS:
            attribute = _JOINT_EFFORTS[type(force)]
            owner = f"{type(force).__name__} {force.name!r}"
            entry.update(joint=force.joint.name, **{attribute: _constant(
                getattr(force, attribute), owner, attribute)})
        elif type(force) in _JOINT_SPRINGS:
            entry.update(joint=force.joint.name,
                         **{k: _plain(getattr(force, k)) for k in _JOINT_SPRINGS[type(force)]})
        elif isinstance(force, Load):
            owner = f"Load {force.name!r}"
            entry.update(body=force.body.name, force=_constant(force.force, owner, "force"),
                         torque=_constant(force.torque, owner, "torque"),
                         point=_plain(force.point), frame=force.frame)
        elif isinstance(force, CentralGravity):
            entry.update(mu=force.mu, center=force.center.tolist(),
                         gravity_gradient=force.gravity_gradient,
                         bodies=None if force._bodies is None else
                         [b.name for b in force._bodies])
        elif isinstance(force, UniformGravity):
            entry.update(acceleration=force.acceleration.tolist(),
                         bodies=None if force._bodies is None else
                         [b.name for b in force._bodies])
        else:
            raise ModelError(f"force {force.name!r} of type {type(force).__name__} cannot be "
                             f"saved to JSON: save_system writes springs, dampers, gravity, "
                             f"loads and single-joint actuators with constant values")
        forces.append(entry)
    return {"format": FORMAT, "version": VERSION,
            "gravity": None if system.gravity is None else system.gravity.tolist(),
            "redundant": system.redundant,
            "bodies": bodies, "joints": joints, "forces": forces}


def save_system(system: System, path: str | os.PathLike) -> None:
    """Write ``system`` to a JSON file."""
    path = Path(path)
    if path.is_dir():
        raise ModelError(f"save_system: {path} is a directory; give a file name")
    text = json.dumps(system_to_dict(system), indent=1)
    path.parent.mkdir(parents=True, exist_ok=True)  # as save_solution and the plots do
    path.write_text(text)


def system_from_dict(data: dict, source: str = "model description") -> System:
    """Rebuild a System from :func:`system_to_dict` output, validating every entry."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ModelError(f"{source}: not an mbs model file (expected format {FORMAT!r})")
    if data.get("version") != VERSION:
        raise ModelError(f"{source}: unknown mbs model version {data.get('version')!r}; this "
                         f"mbs reads version {VERSION}")
    for group in ("bodies", "joints", "forces"):
        if not isinstance(data.get(group, []), list):
            raise ModelError(f"{source}: field {group!r} must be a list of entries, got "
                             f"{type(data[group]).__name__}")
    try:
        system = System(gravity=data.get("gravity"),
                        redundant=data.get("redundant", "remove"))
        for index, entry in enumerate(data.get("bodies", [])):
            where = f"{source}: bodies[{index}]"
            kind = _field(entry, "type", where)
            state = entry.get("state", {})
            if not isinstance(state, dict):
                raise ModelError(f"{where}: field 'state' must be an object with position, "
                                 f"velocity, ..., got {type(state).__name__}")
            _known_fields(entry, _BODY_FIELDS.get(kind, ()), where)
            if kind == "RigidBody":
                body = RigidBody(_field(entry, "mass", where), _field(entry, "inertia", where),
                                 name=_field(entry, "name", where), shape=entry.get("shape"))
            elif kind == "PointMass":
                body = PointMass(_field(entry, "mass", where), name=_field(entry, "name", where),
                                 radius=entry.get("radius"))
            else:
                raise ModelError(f"{where}: unknown body type {kind!r}")
            body.set_state(**state)
            system.add(body)
        for group in ("joints", "forces"):
            for index, entry in enumerate(data.get(group, [])):
                system.add(_element(system, entry, f"{source}: {group}[{index}]"))
    except MbsError:
        raise
    except (TypeError, KeyError, ValueError, AttributeError, IndexError) as exc:
        raise ModelError(f"{source}: malformed entry ({type(exc).__name__}: {exc})") from exc
    return system


def load_system(path: str | os.PathLike) -> System:
    """Read a System written by :func:`save_system`."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"no such model file: {path}")
    if path.suffix.lower() == ".npz":
        raise ModelError(f"{path}: an .npz file holds a solution (save_solution), not a "
                         f"model; read it with mbs.load_solution, and a model with the JSON "
                         f"file of save_system")
    text = read_text(path, MAX_MODEL_BYTES, "a model file")
    return system_from_dict(load_json(text, path), str(path))


def _field(entry: dict, key: str, where: str):
    if not isinstance(entry, dict) or key not in entry:
        raise ModelError(f"{where}: missing field {key!r}")
    return entry[key]


def _body(system: System, name, where: str):
    try:
        return system[name]
    except KeyError:
        raise ModelError(f"{where}: unknown body {name!r}") from None


def _known_fields(entry: dict, fields: tuple[str, ...], where: str) -> None:
    """Refuse fields the entry's type does not have: a misspelt one (``dampng``) would
    otherwise be ignored, and the element built without it."""
    unknown = sorted(set(entry) - {"type", "name", *fields})
    if unknown and fields:
        raise ModelError(f"{where}: unknown field{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(map(repr, unknown))} for a {entry['type']}; its fields "
                         f"are {', '.join(map(repr, ('type', 'name', *fields)))}")


def _element_fields(cls) -> tuple[str, ...]:
    """The fields an element of type ``cls`` has in a model file (see system_to_dict)."""
    if cls in _JOINT_ARGS or cls in _FORCE_ARGS:
        return ("body_a", "body_b", *(_JOINT_ARGS.get(cls) or _FORCE_ARGS[cls]))
    if cls in _JOINT_EFFORTS:
        return ("joint", _JOINT_EFFORTS[cls])
    if cls in _JOINT_SPRINGS:
        return ("joint", *_JOINT_SPRINGS[cls])
    if cls is Load:
        return ("body", "force", "torque", "point", "frame")
    if cls is CentralGravity:
        return ("mu", "center", "gravity_gradient", "bodies")
    return ("acceleration", "bodies")


def _element(system: System, entry: dict, where: str):
    kind = _field(entry, "type", where)
    cls = _BY_NAME.get(kind)
    if cls is None:
        raise ModelError(f"{where}: unknown element type {kind!r}")
    _known_fields(entry, _element_fields(cls), where)
    name = entry.get("name")
    if cls in _JOINT_ARGS or cls in _FORCE_ARGS:
        args = _JOINT_ARGS.get(cls) or _FORCE_ARGS[cls]
        kwargs = {k: entry.get(k) for k in args}
        if cls in (Revolute, Cylindrical, Prismatic, Universal, Spherical, Damper):
            kwargs = {k: v for k, v in kwargs.items() if v is not None}
        return cls(_body(system, _field(entry, "body_a", where), where),
                   _body(system, _field(entry, "body_b", where), where), name=name, **kwargs)
    if cls in _JOINT_EFFORTS:
        attribute = _JOINT_EFFORTS[cls]
        return cls(_body(system, _field(entry, "joint", where), where),
                   _field(entry, attribute, where), name=name)
    if cls in _JOINT_SPRINGS:
        kwargs = {k: entry[k] for k in _JOINT_SPRINGS[cls] if entry.get(k) is not None}
        return cls(_body(system, _field(entry, "joint", where), where), name=name, **kwargs)
    if cls is Load:
        return Load(_body(system, _field(entry, "body", where), where), force=entry.get("force"),
                    torque=entry.get("torque"), point=entry.get("point"),
                    frame=entry.get("frame", "world"), name=name)
    bodies = entry.get("bodies")
    bodies = None if bodies is None else [_body(system, b, where) for b in bodies]
    if cls is CentralGravity:
        return CentralGravity(_field(entry, "mu", where), center=entry.get("center", (0, 0, 0)),
                              bodies=bodies, gravity_gradient=entry.get("gravity_gradient", True),
                              name=name)
    return UniformGravity(_field(entry, "acceleration", where), bodies=bodies, name=name)
