"""The ``mbs`` command line: list and run the example gallery, convergence studies.

    mbs examples
    mbs solvers
    mbs run heavy-top --solver em --h 0.002 --t-end 2 --animate top.mp4 --plot energy.png
    mbs run my_model.py --t-end 5 --save run.npz
    mbs run heavy-top --solver lobatto --stages 4
    mbs run heavy-top --solver vrkmk --option tableau=gauss-3
    mbs convergence heavy-top --solvers em,ggl-vi-a --h 0.004,0.002,0.001

``run`` takes a gallery name or a Python file defining ``build()`` (returning an
:class:`mbs.System`) and optionally ``RECOMMENDED = dict(solver=..., h=..., t_end=...)``,
``VIZ = dict(...)`` (animation options) and ``report(solution) -> str``. The Lie-group
solvers ``vrkmk`` and ``vcg`` run the system compiled with ``formulation="lie-group"``.
When a run fails, the steps accepted before the failure still go to ``--save``, ``--csv``,
``--vtk`` and the plots.
Exit codes: 0 success, 1 the simulation failed, 2 bad usage (unknown names, bad values,
unsupported output file types), 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import warnings
from pathlib import Path

from mbs.errors import MbsError, ModelError, SimulationInterrupted, SolverError
from mbs.safe_files import check_writable

#: File types of the outputs, checked before simulating so that a wrong suffix does not cost
#: the run. Animations: those of :mod:`mbs.viz.writers` (not imported from there because
#: importing :mod:`mbs.viz` loads PyVista); figures: those :mod:`mbs.plots` saves.
ANIMATION_SUFFIXES = (".mp4", ".mov", ".mkv", ".avi", ".webm", ".gif")
FIGURE_SUFFIXES = (".png", ".pdf", ".svg")
CSV_SUFFIXES = (".csv", ".txt")
SAVE_SUFFIXES = (".npz", ".h5", ".hdf5")
VTK_SUFFIXES = (".pvd",)
#: Warnings longer than this are cut (a list of a hundred removed constraint equations says
#: no more than its first lines); the Python API gives the whole text.
WARNING_LENGTH = 600

#: Exit code of a run stopped by Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A bad command-line value (reported with exit code 2)."""


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0.0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _float_list(text: str) -> list[float]:
    return [_positive_float(part) for part in text.split(",") if part.strip()]


def _resolution(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT like 640x480, got {text!r}"
                                         ) from None
    if width < 16 or height < 16:
        raise argparse.ArgumentTypeError(f"resolution too small: {text!r}")
    return width, height


def _solver_name(text: str) -> str:
    """A director solver of :data:`mbs.solvers.REGISTRY` (what ``mbs convergence`` runs)."""
    from mbs.liegroup.simulation import LIE_GROUP_SOLVERS
    from mbs.solvers import REGISTRY

    name = text.lower()
    if name in LIE_GROUP_SOLVERS:
        raise argparse.ArgumentTypeError(
            f"{name} integrates the Lie-group formulation, which this command does not "
            f"compile; choose one of {', '.join(REGISTRY)} (or use 'mbs run --solver {name}')")
    if name not in REGISTRY:
        raise argparse.ArgumentTypeError(f"unknown solver {text!r}; choose one of "
                                         f"{', '.join(REGISTRY)}")
    return name


def _check_run_solver(name: str) -> None:
    """A director solver, or a Lie-group one (``mbs run`` compiles the system for it);
    checked after the script is loaded, which may register a scheme of its own."""
    from mbs.liegroup.simulation import LIE_GROUP_SOLVERS
    from mbs.solvers import REGISTRY

    if name not in REGISTRY and name not in LIE_GROUP_SOLVERS:
        raise UsageError(f"--solver: unknown solver {name!r}; choose one of "
                         f"{', '.join([*REGISTRY, *LIE_GROUP_SOLVERS])} (a script may add "
                         f"its own to mbs.solvers.REGISTRY)")


def _solver_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one solver")
    return [_solver_name(name) for name in names]


def _option_value(text: str) -> object:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.lower() == "none":
        return None
    return text


def _key_value(text: str) -> tuple[str, object]:
    key, separator, value = text.partition("=")
    key = key.strip()
    if not separator or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE like theta=0.5, got {text!r}")
    return key, _option_value(value.strip())


def _composable_solvers() -> list[str]:
    """The solvers ``order=`` composes (:attr:`mbs.solvers.base.Solver.composable`)."""
    from mbs.solvers import REGISTRY, make_solver

    return [name for name in REGISTRY if make_solver(name).composable]


def _lie_group_choices() -> dict[str, tuple[str, dict[str, int], int]]:
    """For vrkmk and vcg: the option selecting the method, its values with their orders, and
    the order of the default method."""
    from mbs.liegroup.simulation import make_method
    from mbs.liegroup.vcg import COMPOSITION_ORDERS
    from mbs.liegroup.vrkmk import TABLEAUX

    tableaux = dict(sorted(((name, TABLEAUX[name].order) for name in TABLEAUX),
                           key=lambda item: item[1]))
    return {"vrkmk": ("tableau", tableaux, make_method("vrkmk").order),
            "vcg": ("composition", dict(COMPOSITION_ORDERS), make_method("vcg").order)}


def _lie_group_usage(solver: str) -> str:
    option, orders, default = _lie_group_choices()[solver]
    listed = ", ".join(f"{name} ({order})" for name, order in orders.items())
    return (f"--option {option}=NAME selects the method, NAME (order) one of {listed}; "
            f"default: order {default}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mbs", description="Multibody dynamics with structure-preserving integrators: "
        "run the example gallery or your own model, animate, plot, and study convergence.",
        epilog="Run 'mbs COMMAND --help' for the options of a command.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    sub.add_parser("examples", help="list the bundled examples",
                   description="List the example gallery with recommended settings.")
    sub.add_parser("solvers", help="list the time integrators and their properties",
                   description="Print the solver table (order, symplecticity, conservation, "
                   "constraints at step ends).")

    run = sub.add_parser("run", help="simulate an example or a script",
                         description="Simulate a gallery example (see 'mbs examples') or a "
                         "Python file defining build(); print the model and conservation "
                         "summaries; optionally animate, plot and save.")
    run.add_argument("target", metavar="NAME|script.py|model.json")
    run.add_argument("--solver", type=str.lower,
                     help="time integrator: a name of 'mbs solvers', or vrkmk or vcg (the "
                     "Lie-group formulation) (default: the example's recommendation, else em)")
    run.add_argument("--h", type=_positive_float,
                     help="step size [s] (default: the example's recommendation, else 0.01)")
    run.add_argument("--t-end", type=_positive_float,
                     help="end time [s] (default: the example's recommendation, else 1)")
    run.add_argument("--order", type=int, choices=(2, 4, 6),
                     help=f"compose {', '.join(_composable_solvers())} to order 4 or 6 "
                     f"(default: the scheme itself, order 2)")
    run.add_argument("--stages", type=_positive_int,
                     help="stages s of lobatto, 2 .. 10 (order 2s - 2; default 3)")
    run.add_argument("--option", type=_key_value, action="append", metavar="KEY=VALUE",
                     help="any other solver option, repeatable: e.g. theta=0.5 (ggl-vi-*), "
                     "s=3 and k=6 (hbvm), backend=compiled, tableau=gauss-3 (vrkmk), "
                     "composition=yoshida-6 (vcg)")
    run.add_argument("--project", action="store_true",
                     help="project an inconsistent initial state onto the constraints")
    out = run.add_argument_group("output")
    out.add_argument("--animate", metavar="PATH",
                     help=f"write an animation ({', '.join(ANIMATION_SUFFIXES)})")
    out.add_argument("--snapshot", metavar="PATH", help="write a picture (.png) of one instant")
    out.add_argument("--time", type=float, help="time of the snapshot (default: the end)")
    out.add_argument("--plot", metavar="PATH",
                     help=f"energy error plot ({', '.join(FIGURE_SUFFIXES)})")
    out.add_argument("--plot-momentum", metavar="PATH", help="momentum error plot")
    out.add_argument("--plot-constraints", metavar="PATH", help="constraint residual plot")
    out.add_argument("--save", metavar="PATH",
                     help="save the solution (.npz: exact round trip; .h5: HDF5 for other tools)")
    out.add_argument("--csv", metavar="PATH",
                     help=f"observables as CSV ({', '.join(CSV_SUFFIXES)})")
    out.add_argument("--vtk", metavar="PATH", help="ParaView time series (.pvd + .vtp files)")
    anim = run.add_argument_group("animation")
    anim.add_argument("--fps", type=_positive_float,
                      help="frames per second (default: the script's VIZ, else 30)")
    anim.add_argument("--speed", type=_positive_float,
                      help="real-time factor (0.5 = slow motion; default 1)")
    anim.add_argument("--frames", type=_positive_int, help="exact number of frames")
    anim.add_argument("--resolution", type=_resolution,
                      help="WIDTHxHEIGHT (default: the script's VIZ, else 640x480)")
    anim.add_argument("--camera", choices=("fixed", "follow", "lvlh"),
                      help="camera mode (default: the example's, else fixed)")
    anim.add_argument("--follow", metavar="BODY", help="body followed by the camera")
    anim.add_argument("--view", choices=("iso", "front", "back", "side", "top"),
                      help="view direction")
    run.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                     help="progress bars (auto: when writing to a terminal)")
    run.add_argument("--quiet", action="store_true", help="print only the summaries")

    conv = sub.add_parser("convergence", help="errors versus step size for several solvers",
                          description="Run an example at several step sizes with several "
                          "solvers against a fine reference run; print the error/order table.")
    conv.add_argument("target", metavar="NAME|script.py")
    conv.add_argument("--solvers", type=_solver_list, default=["em"],
                      help="comma-separated solver names (default: em)")
    conv.add_argument("--h", type=_float_list, default=[0.004, 0.002, 0.001],
                      help="comma-separated step sizes (default 0.004,0.002,0.001)")
    conv.add_argument("--t-end", type=_positive_float,
                      help="end time (default: 50 times the largest h)")
    conv.add_argument("--option", type=_key_value, action="append", metavar="KEY=VALUE",
                      help="an option of the studied solvers, e.g. stages=4 (lobatto) or "
                           "order=4; repeat for several")
    conv.add_argument("--reference-solver", type=_solver_name, default="em")
    conv.add_argument("--reference-option", type=_key_value, action="append",
                      metavar="KEY=VALUE",
                      help="an option of the reference solver, e.g. stages=6 with "
                           "--reference-solver lobatto; repeat for several")
    conv.add_argument("--reference-factor", type=_positive_int, default=8,
                      help="reference step = smallest h / this (default 8)")
    conv.add_argument("--plot", metavar="PATH", help="log-log error plot (.png, .pdf)")
    return parser


def _cmd_examples() -> int:
    from mbs.gallery import DEFAULT_SETTINGS, EXAMPLES, available, load_example

    print(f"{'name':<22}{'solver':<8}{'h':>8}{'t_end':>8}  description")
    for name, entry in EXAMPLES.items():
        if not available(name):
            print(f"{name:<22}{'':<8}{'':>8}{'':>8}  {entry.title} (not available)")
            continue
        try:
            _, rec, _, title = load_example(name)
        except Exception as exc:  # a broken example must not hide the others
            print(f"{name:<22}{'':<8}{'':>8}{'':>8}  {entry.title} (fails to load: {exc})")
            continue
        rec = {**DEFAULT_SETTINGS, **rec}
        print(f"{name:<22}{rec['solver']:<8}{rec['h']:>8g}{rec['t_end']:>8g}  {title}")
    print("\nrun one with: mbs run NAME [--solver S --h H --t-end T --animate out.mp4]")
    return 0


def _cmd_solvers() -> int:
    from mbs.solvers import solver_table

    print(solver_table())
    print("\nLie-group formulation (rigid bodies on SO(3) x R^3; joints: a spherical joint "
          "to the ground; no loads or dampers), with 'mbs run --solver vrkmk|vcg':")
    for name in _lie_group_choices():
        print(f"  {name:<6} {_lie_group_usage(name)}")
    return 0


def _progress(choice: str) -> bool:
    if choice == "on":
        return True
    if choice == "off":
        return False
    return sys.stderr.isatty()


def _check_output_types(args) -> None:
    """Refuse an output file type no writer handles before anything is simulated."""
    checks = [("--animate", args.animate, ANIMATION_SUFFIXES, ", ".join(ANIMATION_SUFFIXES))]
    checks += [(flag, path, FIGURE_SUFFIXES, ", ".join(FIGURE_SUFFIXES)) for flag, path in
               (("--plot", args.plot), ("--plot-momentum", args.plot_momentum),
                ("--plot-constraints", args.plot_constraints))]
    if args.snapshot:
        checks.append(("--snapshot", args.snapshot, _image_suffixes(),
                       ".png (or another image type Pillow writes, e.g. .jpg, .tif, .webp)"))
    checks.append(("--csv", args.csv, CSV_SUFFIXES, ", ".join(CSV_SUFFIXES)))
    checks.append(("--save", args.save, SAVE_SUFFIXES,
                   ".npz (mbs.load_solution reads it) or .h5/.hdf5 (HDF5 export)"))
    checks.append(("--vtk", args.vtk, VTK_SUFFIXES, ".pvd (a ParaView time series)"))
    for flag, path, allowed, described in checks:
        if path and allowed is not None and Path(path).suffix.lower() not in allowed:
            raise UsageError(f"{flag} {path}: cannot write this file type; use {described}")
    for flag, path, _, _ in checks:
        if path:
            try:
                check_writable(Path(path), "the output")
            except ModelError as exc:
                raise UsageError(f"{flag} {path}: {exc}") from None
    if args.time is not None and not args.snapshot:
        raise UsageError("--time is the time of --snapshot; give --snapshot PATH with it")


def _check_run_options(args, model, h: float, t_end: float, viz_defaults: dict) -> None:
    """Refuse, before simulating, a --time outside the run (which ends at the last whole
    step), a --follow naming no body or with a fixed camera, and a GIF frame rate no
    viewer plays."""
    end = round(t_end / h) * h
    if args.time is not None and not 0.0 <= args.time <= end + 1e-9 * max(1.0, end):
        raise UsageError(f"--time {args.time:g} lies outside the run (t = 0 to {end:g})")
    settings, options = _render_settings(args, viz_defaults)
    follow = options.get("follow")
    if follow is not None:
        names = [body.name for body in getattr(model, "director_model", model).bodies]
        if follow not in names:
            raise UsageError(f"--follow {follow}: no body of that name; bodies: "
                             f"{', '.join(names)}")
        if options.get("camera") == "fixed":
            raise UsageError(f"--follow {follow} names a body for a moving camera, but the "
                             f"camera is fixed; give --camera follow (or lvlh), or leave "
                             f"--follow out")
    if args.animate and Path(args.animate).suffix.lower() == ".gif":
        from mbs.viz.writers import check_gif_fps

        try:
            check_gif_fps(settings["fps"])
        except ModelError as exc:
            raise UsageError(f"--animate {args.animate}: {exc}") from None


def _image_suffixes() -> tuple[str, ...] | None:
    """The suffixes Pillow (which writes snapshots) can save; None without Pillow, whose
    absence the snapshot itself reports."""
    try:
        from PIL import Image
    except ImportError:
        return None
    Image.init()
    return tuple(suffix for suffix, kind in Image.registered_extensions().items()
                 if kind in Image.SAVE)


def _solver_options(args, solver: str) -> dict:
    """The solver's keyword options from --option, --order and --stages."""
    options = dict(args.option or ())
    if args.order is not None:
        composable = _composable_solvers()
        if solver not in composable:
            if solver == "lobatto":
                hint = "lobatto has order 2s - 2: use --stages 3 (order 4) or 4 (order 6)"
            elif solver in _lie_group_choices():
                hint = _lie_group_usage(solver)
            else:
                hint = "its order is fixed (see 'mbs solvers')"
            raise UsageError(f"--order composes {', '.join(composable)}, not {solver}; {hint}")
        options = _add_option(options, "order", args.order, "--order")
    if args.stages is not None:
        if solver != "lobatto":
            raise UsageError(f"--stages sets the stages of lobatto, not of {solver}; other "
                             f"solvers take their options as --option KEY=VALUE (hbvm: "
                             f"--option s=S --option k=K)")
        options = _add_option(options, "stages", args.stages, "--stages")
    return options


def _add_option(options: dict, key: str, value, flag: str) -> dict:
    if key in options and options[key] != value:
        raise UsageError(f"{flag} {value} contradicts --option {key}={options[key]}")
    return {**options, key: value}


def _compile(system, solver):
    from mbs.liegroup.simulation import is_lie_group_solver

    if not is_lie_group_solver(solver):
        return system.compile()
    try:
        return system.compile(formulation="lie-group")
    except ModelError as exc:
        raise UsageError(f"{exc}\n--solver {solver} integrates the Lie-group formulation; "
                         f"run this system with a director solver (e.g. --solver em or "
                         f"lobatto)") from exc


def _cmd_run(args) -> int:
    import mbs
    from mbs.gallery import load_example, script_failure

    _check_output_types(args)
    module, recommended, viz_options, title = load_example(args.target)
    solver = args.solver or recommended["solver"]
    if isinstance(solver, str):
        solver = solver.lower()
        _check_run_solver(solver)
    h = args.h or recommended["h"]
    t_end = args.t_end or recommended["t_end"]
    options = _solver_options(args, solver)
    progress = _progress(args.progress)
    try:
        system = module.build()
    except MbsError:
        raise
    except Exception as exc:  # the user's build(): name it and where it failed
        raise UsageError(f"{args.target}: build() raised "
                         f"{script_failure(exc, getattr(module, '__file__', None) or '')}"
                         ) from exc
    if not isinstance(system, mbs.System):
        raise UsageError(f"{args.target}: build() must return an mbs.System, got "
                         f"{type(system).__name__}")
    model = _compile(system, solver)
    _check_run_options(args, model, h, t_end, viz_options)
    if not args.quiet:
        print(f"{title}\n")
        system.summary(getattr(model, "director_model", model))
        print()
    try:
        solution = mbs.simulate(model, solver, h=h, t_end=t_end, project=args.project,
                                progress=progress, **options)
    except (SolverError, SimulationInterrupted) as exc:
        return _keep_partial_run(args, exc, viz_options)
    print(solution.conservation_summary())
    report = getattr(module, "report", None)
    if callable(report):
        print(report(solution))
    wrote: list[str] = []
    try:
        _write_files(args, solution, viz_options, wrote)
        _render(args, solution, viz_options, progress, wrote)
    finally:  # also the files written before a later one failed
        for path in wrote:
            print(f"wrote {path}")
    return 0


#: The library's pointer to ``error.solution``, which means nothing on a command line.
_SOLUTION_POINTER = re.compile(r"[;.]?\s*error\.solution holds[^;(]*?(?=\s*[;(]|\s*$)")


def _keep_partial_run(args, error: SolverError | SimulationInterrupted,
                      viz_defaults: dict) -> int:
    """Report a failed or interrupted run and write the steps it accepted to the requested
    files and plots (animations and snapshots are not rendered for it); the exit code."""
    code = EXIT_INTERRUPTED if isinstance(error, SimulationInterrupted) else 1
    message = _SOLUTION_POINTER.sub("", str(error))
    print(f"mbs run: error: {message}", file=sys.stderr)
    partial = getattr(error, "solution", None)
    steps = 0 if partial is None else len(partial.t) - 1
    requested = [path for path in (args.save, args.csv, args.vtk, args.plot,
                                   args.plot_momentum, args.plot_constraints) if path]
    if steps < 1:
        if requested:
            print("mbs run: no step was accepted; nothing written", file=sys.stderr)
        return code
    wrote: list[str] = []
    try:
        _write_files(args, partial, viz_defaults, wrote)
    except Exception as exc:  # noqa: BLE001 - the run's failure stays the error reported
        print(f"mbs run: writing the accepted steps failed: {type(exc).__name__}: {exc}",
              file=sys.stderr)
    span = f"t = {partial.t[0]:g} to {partial.t[-1]:g}"
    if wrote:
        print(f"mbs run: the {steps} accepted steps ({span}) were written to "
              f"{', '.join(wrote)}", file=sys.stderr)
    elif not requested:
        print(f"mbs run: the {steps} accepted steps ({span}) were not kept; give --save "
              f"PATH to keep them", file=sys.stderr)
    skipped = [flag for flag, path in (("--animate", args.animate),
                                       ("--snapshot", args.snapshot)) if path]
    if skipped:
        print(f"mbs run: not rendered for an incomplete run: {', '.join(skipped)}",
              file=sys.stderr)
    return code


def _viz_options(args, defaults: dict) -> dict:
    """The script's VIZ with the flags over it: --follow makes a fixed camera follow, and
    --camera fixed drops the script's followed body."""
    options = dict(defaults)
    for key in ("camera", "follow", "view"):
        value = getattr(args, key)
        if value is not None:
            options[key] = value
    if args.follow and args.camera is None and options.get("camera") in (None, "fixed"):
        options["camera"] = "follow"
    if args.camera == "fixed" and args.follow is None:
        options.pop("follow", None)
    return options


#: Rendering settings that a script's VIZ may give too; the command line's flags take
#: precedence over it.
RENDER_DEFAULTS = {"fps": 30.0, "speed": 1.0, "frames": None, "resolution": (640, 480)}


def _render_settings(args, viz_defaults: dict) -> tuple[dict, dict]:
    """The rendering settings (flag, else the script's VIZ, else the default) and the other
    animation options."""
    options = _viz_options(args, viz_defaults)
    settings = {key: getattr(args, key) if getattr(args, key) is not None
                else options.get(key, default) for key, default in RENDER_DEFAULTS.items()}
    return settings, {k: v for k, v in options.items() if k not in RENDER_DEFAULTS}


def _write_files(args, solution, viz_defaults: dict, wrote: list[str]) -> None:
    """Write --save, --csv, the plots and --vtk, appending each path to ``wrote`` as soon as
    it is written (so that a later failure still reports the earlier files)."""
    if args.save:
        from mbs.io import save_hdf5, save_solution

        hdf5 = args.save.lower().endswith((".h5", ".hdf5"))
        wrote.append(str((save_hdf5 if hdf5 else save_solution)(solution, args.save)))
    if args.csv:
        from mbs.io import save_csv

        wrote.append(str(save_csv(solution, args.csv)))
    plots = ((args.plot, "plot_energy"), (args.plot_momentum, "plot_momentum"),
             (args.plot_constraints, "plot_constraints"))
    if any(path for path, _ in plots):
        from mbs import plots as plotting

        for path, name in plots:
            if path:
                getattr(plotting, name)(solution, path=path)
                wrote.append(path)
    if args.vtk:
        from mbs.io import save_vtk

        settings, options = _render_settings(args, viz_defaults)
        scene_only = {k: v for k, v in options.items()
                      if k not in ("camera", "follow", "view", "zoom", "center")}
        wrote.append(str(save_vtk(solution, args.vtk, fps=settings["fps"],
                                  speed=settings["speed"], frames=settings["frames"],
                                  **scene_only)))


def _render(args, solution, viz_defaults: dict, progress: bool, wrote: list[str]) -> None:
    """Write --snapshot and --animate (the animation reports itself)."""
    if not (args.animate or args.snapshot):
        return
    from mbs import viz

    settings, options = _render_settings(args, viz_defaults)
    if args.snapshot:
        viz.snapshot(solution, args.snapshot, time=args.time,
                     resolution=settings["resolution"], **options)
        wrote.append(args.snapshot)
    if args.animate:
        report = viz.animate(solution, args.animate, progress=progress, **settings,
                             **options)
        print(f"animation: {report}")


#: Keywords ``mbs convergence`` sets itself, with the flag that sets them.
_STUDY_SETTINGS = {"h": "--h", "t_end": "--t-end", "path": "--plot",
                   "reference_solver": "--reference-solver",
                   "reference_factor": "--reference-factor",
                   "reference_options": "--reference-option", "reference": "the Python API",
                   "print_table": "the Python API"}


def _cmd_convergence(args) -> int:
    from mbs.gallery import load_example
    from mbs.plots import convergence_study

    module, _, _, title = load_example(args.target)
    if len(set(args.h)) < 2:
        raise UsageError("--h: give at least two different step sizes, e.g. "
                         "0.004,0.002,0.001")
    if len(set(args.h)) < len(args.h):
        raise UsageError(f"--h: each step size once, got {','.join(map(str, args.h))}")
    for flag, given in (("--option", args.option), ("--reference-option", args.reference_option)):
        for key, _ in given or []:
            if key in _STUDY_SETTINGS:
                raise UsageError(f"{flag} {key}=...: {key} is a setting of the study, not a "
                                 f"solver option; use {_STUDY_SETTINGS[key]}")
    t_end = args.t_end or 50.0 * max(args.h)
    print(f"{title}: convergence study\n")
    convergence_study(module.build, args.solvers, args.h, t_end,
                      reference_solver=args.reference_solver,
                      reference_factor=args.reference_factor,
                      reference_options=dict(args.reference_option or []) or None,
                      path=args.plot, **dict(args.option or []))
    if args.plot:
        print(f"wrote {args.plot}")
    return 0


def _warning_printer(command: str):
    """A ``warnings.showwarning`` that prints "mbs <command>: warning: <message>" to stderr,
    cut to :data:`WARNING_LENGTH` characters, without the source line of a Python warning."""

    def show(message, category, filename, lineno, file=None, line=None):
        text = str(message)
        if len(text) > WARNING_LENGTH:
            text = (f"{text[:WARNING_LENGTH].rstrip()} ... ({len(text) - WARNING_LENGTH} "
                    f"more characters)")
        print(f"mbs {command}: warning: {text}", file=sys.stderr)

    return show


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mbs`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help (0) and usage errors (2)
        return int(exit_.code or 0)
    if args.command is None:
        parser.print_help()
        return 2
    handlers = {"examples": lambda: _cmd_examples(), "solvers": lambda: _cmd_solvers(),
                "run": lambda: _cmd_run(args), "convergence": lambda: _cmd_convergence(args)}
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _warning_printer(args.command)
            return handlers[args.command]()
    except (UsageError, ModelError, FileNotFoundError) as exc:
        print(f"mbs {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except MbsError as exc:
        print(f"mbs {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:
        print(f"mbs {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. 'mbs solvers | head'
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
