"""Peer codes run side by side with mbs: Exudyn (C++ core, PyPI) and pydykit (PyPI).

Both are optional. Every public function here returns a result dict, or a dict with
``"na"`` holding the reason when the peer is missing or cannot model the case; nothing here
raises because a peer is absent or fails.

Exudyn is driven through its Python API without graphics: ``exudyn.StartRenderer`` and the
graphics modules are never used (the benchmark machine has no display). The models are built
to match the mbs cases:

* heavy top: one rigid body (mass, isotropic inertia about the centre of mass), node at the
  centre of mass, spherical joint to the ground at the origin, gravity -z; same initial
  rotation, velocity and angular velocity w_p e3 + w_s d3;
* chains: N boxes 0.5 x 0.05 x 0.05 m, density 1000 kg/m^3, spherical joints at their ends,
  the first to the ground, gravity -z (as ``benchmarks.chain_compile.build_chain``);
* double pendulum: translated from the mbs system of ``examples/double_pendulum.py`` (each
  rigid body's mass, inertia tensor about its centre of mass, initial position, rotation and
  velocities; each revolute joint's world point and axis; the gravity vector), node at each
  centre of mass.

Solvers: ``TrapezoidalIndex2`` (Newmark trapezoidal rule, velocity-level constraints) and
``GeneralizedAlpha`` (index 3, default spectral radius 0.9), always with a fixed step
(``adaptiveStep = False``), Euler-parameter nodes unless a config says otherwise, and
``EigenSparse`` for the chains.

pydykit (needs Python >= 3.12) runs in its own interpreter as a subprocess: the environment
variable ``PYDYKIT_PYTHON`` or ``/tmp/pydykit-venv/bin/python`` (created with
``python3.12 -m venv /tmp/pydykit-venv && /tmp/pydykit-venv/bin/pip install pydykit``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np

import mbs
from benchmarks import cases

# -- Exudyn -----------------------------------------------------------------------------------
#: name -> (solver type, Newton settings or None for Exudyn's defaults, node type, note)
EXUDYN_CONFIGS = {
    "trap-idx2": ("TrapezoidalIndex2", None, "ep",
                  "index-2 trapezoidal, default Newton (modified, rel. tol. 1e-8)"),
    "gen-alpha": ("GeneralizedAlpha", None, "ep",
                  "generalized-alpha index 3, rho_inf 0.9, default Newton"),
    "trap-idx2 tight-mod": ("TrapezoidalIndex2",
                            {"modified": True, "relative": 1e-12, "absolute": 1e-14}, "ep",
                            "index-2 trapezoidal, modified Newton, rel. 1e-12 / abs. 1e-14"),
    "trap-idx2 tight-full": ("TrapezoidalIndex2",
                             {"modified": False, "relative": 1e-10, "absolute": 1e-12}, "ep",
                             "index-2 trapezoidal, full Newton, rel. 1e-10 / abs. 1e-12"),
    "gen-alpha lie": ("GeneralizedAlpha", None, "lie",
                      "generalized-alpha, Lie-group (rotation vector) nodes, default Newton"),
}
#: Configurations timed per step on the heavy top and the chains.
EXUDYN_STEP_CONFIGS = ("trap-idx2", "gen-alpha", "trap-idx2 tight-mod")
EXUDYN_CHAIN_CONFIGS = ("trap-idx2", "gen-alpha")
#: Configurations searched for the accuracy-vs-cost rows.
EXUDYN_ENERGY_CONFIGS = ("trap-idx2", "trap-idx2 tight-mod", "trap-idx2 tight-full")
EXUDYN_COM_CONFIGS = ("trap-idx2", "gen-alpha", "gen-alpha lie", "trap-idx2 tight-mod")


def exudyn_status() -> tuple[bool, str]:
    """(importable, version or reason)."""
    try:
        import exudyn
    except Exception as exc:  # ImportError, or a broken binary
        return False, f"exudyn not importable: {type(exc).__name__}: {exc}"
    return True, str(getattr(exudyn, "__version__", "?"))


def _exudyn():
    import exudyn

    exudyn.config.printToConsole = False
    with contextlib.suppress(Exception):
        exudyn.config.suppressWarnings = True
    return exudyn


class _ExudynModel:
    """An assembled Exudyn system with settings for a fixed-step run."""

    def __init__(self, exu, system_container, system, settings, solver_type, node, sensors,
                 nodes=()):
        self.exu, self.sc, self.mbs = exu, system_container, system
        self.settings, self.solver_type, self.node, self.sensors = (
            settings, solver_type, node, sensors)
        self.nodes = tuple(nodes)

    def solve(self) -> None:
        self.mbs.SolveDynamic(self.settings, solverType=self.solver_type)

    def newton_iterations(self) -> tuple[int, int]:
        solver = self.mbs.sys["dynamicSolver"]
        return int(solver.it.newtonStepsCount), int(solver.it.newtonJacobiCount)


def _settings(exu, config: str, h: float, steps: int, sparse: bool, record: bool):
    solver_name, newton, _, _ = EXUDYN_CONFIGS[config]
    settings = exu.SimulationSettings()
    ti = settings.timeIntegration
    ti.numberOfSteps = steps
    ti.endTime = steps * h
    ti.verboseMode = 0
    ti.adaptiveStep = False
    settings.solution.file.write = False
    settings.solution.sensors.active = record
    settings.solution.sensors.writePeriod = h
    settings.show.globalTimers = False
    settings.show.computationTime = False
    if newton is not None:
        ti.newton.useModifiedNewton = newton["modified"]
        ti.newton.relativeTolerance = newton["relative"]
        ti.newton.absoluteTolerance = newton["absolute"]
    if sparse:
        settings.linearSolver.solverType = exu.LinearSolverType.EigenSparse
    return settings, getattr(exu.DynamicSolverType, solver_name)


def _node_type(exu, config: str):
    node = EXUDYN_CONFIGS[config][2]
    return (exu.NodeType.RotationRotationVector if node == "lie"
            else exu.NodeType.RotationEulerParameters)


def exudyn_heavy_top(config: str, h: float, steps: int, record: bool = False) -> _ExudynModel:
    """The heavy top in Exudyn's API (see the module docstring)."""
    exu = _exudyn()
    from exudyn.itemInterface import ObjectGround, SensorNode
    from exudyn.rigidBodyUtilities import RigidBodyInertia

    c, init = cases.heavy_top_constants(), cases.heavy_top_initial()
    sc = exu.SystemContainer()
    system = sc.AddSystem()
    inertia = RigidBodyInertia(c["mass"], np.eye(3) * c["inertia"], inertiaTensorAtCOM=True)
    ground = system.AddObject(ObjectGround())
    body = system.CreateRigidBody(
        inertia=inertia, referencePosition=init["position"],
        referenceRotationMatrix=init["rotation"], initialVelocity=init["velocity"],
        initialAngularVelocity=init["angular_velocity"], gravity=[0.0, 0.0, -c["gravity"]],
        nodeType=_node_type(exu, config), returnDict=True, show=False)
    system.CreateSphericalJoint(itemNumbers=[ground, body["bodyNumber"]],
                                position=[0.0, 0.0, 0.0], show=False)
    node = body["nodeNumber"]
    sensors = []
    if record:
        for variable in ("Position", "Velocity", "AngularVelocity"):
            sensors.append(system.AddSensor(SensorNode(
                nodeNumber=node, storeInternal=True, writeToFile=False,
                outputVariableType=getattr(exu.OutputVariableType, variable))))
    system.Assemble()
    settings, solver_type = _settings(exu, config, h, steps, sparse=False, record=record)
    return _ExudynModel(exu, sc, system, settings, solver_type, node, sensors)


def exudyn_chain(n_links: int, config: str, h: float, steps: int,
                 link_length: float = 0.5) -> _ExudynModel:
    """Chain of N boxes with spherical joints under gravity (as build_chain) in Exudyn."""
    exu = _exudyn()
    from exudyn.itemInterface import ObjectGround
    from exudyn.rigidBodyUtilities import InertiaCuboid

    sc = exu.SystemContainer()
    system = sc.AddSystem()
    previous = system.AddObject(ObjectGround())
    inertia = InertiaCuboid(density=1000.0, sideLengths=[link_length, 0.05, 0.05])
    for k in range(n_links):
        body = system.CreateRigidBody(inertia=inertia,
                                      referencePosition=[(k + 0.5) * link_length, 0.0, 0.0],
                                      gravity=[0.0, 0.0, -9.81], nodeType=_node_type(exu, config),
                                      show=False)
        system.CreateSphericalJoint(itemNumbers=[previous, body],
                                    position=[k * link_length, 0.0, 0.0], show=False)
        previous = body
    system.Assemble()
    settings, solver_type = _settings(exu, config, h, steps, sparse=True, record=False)
    return _ExudynModel(exu, sc, system, settings, solver_type, None, [])


def exudyn_double_pendulum(config: str, h: float, steps: int,
                           record: bool = False) -> _ExudynModel:
    """The double pendulum of ``examples/double_pendulum.py`` in Exudyn's API.

    Built from the mbs system itself (:func:`benchmarks.cases.double_pendulum`), so that the
    masses, inertia tensors, initial state, hinge points and axes and gravity are the same
    numbers; ``model.nodes`` holds the links' nodes (at their centres of mass) in order.
    """
    exu = _exudyn()
    source = cases.double_pendulum()
    sc = exu.SystemContainer()
    system = sc.AddSystem()
    nodes = _add_revolute_mechanism(exu, system, source, _node_type(exu, config))
    system.Assemble()
    settings, solver_type = _settings(exu, config, h, steps, sparse=False, record=record)
    return _ExudynModel(exu, sc, system, settings, solver_type, None, [], nodes=nodes)


def _add_revolute_mechanism(exu, system, source, node_type) -> list[int]:
    """Add the rigid bodies and revolute joints of the mbs System ``source`` to ``system``.

    Returns the node numbers of the bodies, in the order of ``source.bodies``. Raises
    ValueError for anything other than rigid bodies and revolute joints.
    """
    from exudyn.itemInterface import ObjectGround
    from exudyn.rigidBodyUtilities import RigidBodyInertia

    ground = system.AddObject(ObjectGround())
    items, nodes = {source.ground.name: ground}, []
    for body in source.bodies:
        if not isinstance(body, mbs.RigidBody):
            raise ValueError(f"body {body.name!r} is a {type(body).__name__}, not a RigidBody")
        inertia = RigidBodyInertia(body.mass, np.asarray(body.inertia), inertiaTensorAtCOM=True)
        created = system.CreateRigidBody(
            inertia=inertia, referencePosition=body.position,
            referenceRotationMatrix=body.rotation, initialVelocity=body.velocity,
            initialAngularVelocity=body.angular_velocity, gravity=list(source.gravity),
            nodeType=node_type, returnDict=True, show=False)
        items[body.name] = created["bodyNumber"]
        nodes.append(created["nodeNumber"])
    for joint in source.joints:
        if not isinstance(joint, mbs.joints.Revolute):
            raise ValueError(f"joint {joint.name!r} is a {type(joint).__name__}, not Revolute")
        system.CreateRevoluteJoint(itemNumbers=[items[joint.body_a.name],
                                                items[joint.body_b.name]],
                                   position=list(joint.point), axis=list(joint.axis),
                                   useGlobalFrame=True, show=False)
    return nodes


def exudyn_per_step(case: str, config: str, h: float, steps: int, repeats: int,
                    n_links: int | None = None) -> dict:
    """Median per-step wall time of ``steps`` fixed steps (after one warm-up run)."""
    ok, info = exudyn_status()
    if not ok:
        return {"na": info}

    def build(count):
        if case == "heavy_top":
            return exudyn_heavy_top(config, h, count)
        return exudyn_chain(n_links, config, h, count)

    try:
        started = time.perf_counter()
        build(steps)
        build_time = time.perf_counter() - started
        build(min(steps, 5)).solve()  # warm-up
        times, iterations, jacobians = [], [], []
        for _ in range(repeats):
            model = build(steps)
            started = time.perf_counter()
            model.solve()
            times.append((time.perf_counter() - started) / steps)
            its, jacs = model.newton_iterations()
            iterations.append(its / steps)
            jacobians.append(jacs / steps)
    except Exception as exc:
        return {"na": f"Exudyn failed: {type(exc).__name__}: {exc}"}
    return {"per_step_s": statistics.median(times), "per_step_all_s": times,
            "newton_per_step": statistics.median(iterations),
            "jacobians_per_step": statistics.median(jacobians), "compile_s": build_time,
            "compile_what": "Python model build + Assemble", "peak_mem_mib": None,
            "memory_note": "C++ heap not traced", "version": info,
            "note": EXUDYN_CONFIGS[config][3]}


def _build_and_solve(config: str, h: float, steps: int, record: bool = False,
                     build=exudyn_heavy_top):
    """(model, CPU seconds of the solve, None) or (None, 0, failure row) for an Exudyn model
    from ``build(config, h, steps, record=record)`` (default: the heavy top)."""
    try:
        model = build(config, h, steps, record=record)
    except Exception as exc:
        return None, 0.0, {"cpu_s": 0.0, "steps": steps, "error": None,
                           "crash": f"Exudyn model build failed: {type(exc).__name__}: {exc}"}
    started = time.process_time()
    try:
        model.solve()
    except Exception as exc:
        return None, 0.0, {"cpu_s": time.process_time() - started, "error": None,
                           "steps": steps, "failure": f"{type(exc).__name__}: {exc}"}
    return model, time.process_time() - started, None


def exudyn_heavy_top_energy(config: str, h: float, t_end: float) -> dict:
    """CPU time and max relative energy error of an Exudyn heavy-top run over [0, t_end].

    Energy from the node sensors at every step: 1/2 m |v|^2 + 1/2 I |w|^2 + m g z (isotropic
    inertia about the centre of mass), the same function mbs' ``Solution.energy`` evaluates.
    """
    c = cases.heavy_top_constants()
    steps = int(round(t_end / h))
    model, cpu, failed = _build_and_solve(config, h, steps, record=True)
    if failed:
        return failed
    data = [model.mbs.GetSensorStoredData(s)[:, 1:] for s in model.sensors]
    position, velocity, omega = data
    energy = (0.5 * c["mass"] * np.sum(velocity**2, axis=1)
              + 0.5 * c["inertia"] * np.sum(omega**2, axis=1)
              + c["mass"] * c["gravity"] * position[:, 2])
    its, _ = model.newton_iterations()
    return {"cpu_s": cpu, "steps": steps, "newton_per_step": its / steps,
            "error": float(np.max(np.abs(energy - energy[0])) / abs(energy[0])),
            "com_error_end": cases.com_error(position[-1], t_end)}


def exudyn_heavy_top_com(config: str, h: float, t_end: float) -> dict:
    """CPU time and centre-of-mass error |phi - phi_exact| / l at t_end of an Exudyn run."""
    steps = int(round(t_end / h))
    model, cpu, failed = _build_and_solve(config, h, steps)
    if failed:
        return failed
    position = model.mbs.GetNodeOutput(model.node, model.exu.OutputVariableType.Position)
    its, _ = model.newton_iterations()
    return {"cpu_s": cpu, "steps": steps, "newton_per_step": its / steps,
            "error": cases.com_error(position, t_end)}


def exudyn_double_pendulum_positions(config: str, h: float, t_end: float) -> dict:
    """CPU time of an Exudyn double-pendulum run over [0, t_end] and the links' centres of
    mass at t_end (``"positions"``, shape (2, 3), in the order of the mbs bodies)."""
    steps = int(round(t_end / h))
    model, cpu, failed = _build_and_solve(config, h, steps, build=exudyn_double_pendulum)
    if failed:
        return failed
    position = model.exu.OutputVariableType.Position
    its, _ = model.newton_iterations()
    return {"cpu_s": cpu, "steps": steps, "newton_per_step": its / steps,
            "positions": np.array([model.mbs.GetNodeOutput(node, position)
                                   for node in model.nodes])}


# -- pydykit ----------------------------------------------------------------------------------
DEFAULT_PYDYKIT_PYTHON = "/tmp/pydykit-venv/bin/python"

#: Runs inside the pydykit interpreter; prints one JSON line prefixed with RESULT.
_PYDYKIT_WORKER = r'''
import copy, json, statistics, sys, time, tracemalloc
from importlib.resources import files

args = json.loads(sys.argv[1])
try:
    import pydykit
    from pydykit import utils
    from pydykit.configuration import Configuration
    from pydykit.managers import Manager
except Exception as exc:
    print("RESULT " + json.dumps({"na": f"pydykit not importable: {exc}"}))
    raise SystemExit(0)

counter = [0]
_print_residual_norm = utils.print_residual_norm


def counted(value):  # called once per Newton iteration by pydykit's solvers
    counter[0] += 1
    _print_residual_norm(value)


utils.print_residual_norm = counted
rows = []
for name, overrides in args["examples"]:
    try:
        content = utils.load_yaml_file(path=files("pydykit.example_files") / f"{name}.yml")
        for key, value in overrides.get("system", {}).items():
            content["system"][key] = value
        step = overrides.get("step_size", content["time_stepper"]["step_size"])
        content["time_stepper"]["step_size"] = step
        content["time_stepper"]["start"] = 0.0

        def manager(steps):
            c = copy.deepcopy(content)
            c["time_stepper"]["end"] = steps * step
            m = Manager()
            m.configure(Configuration(**c))
            return m

        t0 = time.perf_counter()
        manager(args["steps"])
        configure = time.perf_counter() - t0
        manager(2).manage()  # warm-up
        tracemalloc.start()
        manager(2).manage()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        times, iterations = [], []
        for _ in range(args["repeats"]):
            m = manager(args["steps"])
            steps = m.time_stepper.nbr_time_points - 1
            counter[0] = 0
            t0 = time.perf_counter()
            m.manage()
            times.append((time.perf_counter() - t0) / steps)
            iterations.append(counter[0] / steps)
        rows.append({"example": name, "overrides": overrides, "h": step, "steps": steps,
                     "per_step_s": statistics.median(times), "per_step_all_s": times,
                     "newton_per_step": statistics.median(iterations),
                     "compile_s": configure, "peak_mem_mib": peak / 2**20,
                     "integrator": content["integrator"]["class_name"],
                     "solver": content["simulator"].get("solver_name")})
    except Exception as exc:
        rows.append({"example": name, "na": f"{type(exc).__name__}: {exc}"})
print("RESULT " + json.dumps({"version": pydykit.__version__, "python": sys.version.split()[0],
                              "rows": rows}))
'''

#: (example file, overrides): the shipped conservative four-particle example (implicit
#: midpoint) and its discrete-gradient sibling with the dampers removed at the same step, the
#: energy-conserving analogue of mbs' EM scheme.
PYDYKIT_EXAMPLES = (
    ("four_particle_system_midpoint", {}),
    ("four_particle_system_discrete_gradient_dissipative",
     {"system": {"dampers": []}, "step_size": 0.01}),
)


def pydykit_python() -> str | None:
    """The interpreter that has pydykit (PYDYKIT_PYTHON or the default venv), if present."""
    for candidate in (os.environ.get("PYDYKIT_PYTHON"), DEFAULT_PYDYKIT_PYTHON):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def pydykit_status() -> tuple[bool, str]:
    python = pydykit_python()
    if python is None:
        return False, (f"no pydykit interpreter (set PYDYKIT_PYTHON or create "
                       f"{DEFAULT_PYDYKIT_PYTHON})")
    return True, python


def pydykit_four_particle(steps: int = 9, repeats: int = 3, timeout: float = 600.0) -> dict:
    """Per-step time of pydykit's four-particle examples, measured in its own interpreter."""
    ok, python = pydykit_status()
    if not ok:
        return {"na": python}
    payload = json.dumps({"examples": PYDYKIT_EXAMPLES, "steps": steps, "repeats": repeats})
    try:
        done = subprocess.run([python, "-c", _PYDYKIT_WORKER, payload], capture_output=True,
                              text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"na": f"pydykit subprocess failed: {type(exc).__name__}: {exc}"}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
            result["interpreter"] = python
            return result
    tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"na": f"pydykit subprocess exited {done.returncode}: {tail[0][:200]}"}


def silence():
    """Context manager that swallows stdout (Exudyn may print despite printToConsole)."""
    return contextlib.redirect_stdout(io.StringIO())
