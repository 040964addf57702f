"""The ``mbs`` command line: list and run the example gallery, convergence studies.

    mbs examples
    mbs solvers
    mbs run heavy-top --solver em --h 0.002 --t-end 2 --animate top.mp4 --plot energy.png
    mbs run my_model.py --t-end 5 --save run.npz
    mbs convergence heavy-top --solvers em,ggl-vi-a --h 0.004,0.002,0.001

``run`` takes a gallery name or a Python file defining ``build()`` (returning an
:class:`mbs.System`) and optionally ``RECOMMENDED = dict(solver=..., h=..., t_end=...)``,
``VIZ = dict(...)`` (animation options) and ``report(solution) -> str``.
Exit codes: 0 success, 1 the simulation failed, 2 bad usage (unknown names, bad values).
"""

from __future__ import annotations

import argparse
import os
import sys

from mbs.errors import MbsError, ModelError, SolverError


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
    from mbs.solvers import REGISTRY

    if text.lower() not in REGISTRY:
        raise argparse.ArgumentTypeError(f"unknown solver {text!r}; choose one of "
                                         f"{', '.join(REGISTRY)}")
    return text.lower()


def _solver_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one solver")
    return [_solver_name(name) for name in names]


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
    run.add_argument("--solver", type=_solver_name, help="time integrator (default: the "
                     "example's recommendation)")
    run.add_argument("--h", type=_positive_float, help="step size [s]")
    run.add_argument("--t-end", type=_positive_float, help="end time [s]")
    run.add_argument("--order", type=int, choices=(2, 4, 6), default=2,
                     help="compose em or rattle to order 4 or 6 (default 2: the scheme itself)")
    run.add_argument("--project", action="store_true",
                     help="project an inconsistent initial state onto the constraints")
    out = run.add_argument_group("output")
    out.add_argument("--animate", metavar="PATH", help="write an animation (.mp4 or .gif)")
    out.add_argument("--snapshot", metavar="PATH", help="write a picture (.png) of one instant")
    out.add_argument("--time", type=float, help="time of the snapshot (default: the end)")
    out.add_argument("--plot", metavar="PATH", help="energy error plot (.png, .pdf, .svg)")
    out.add_argument("--plot-momentum", metavar="PATH", help="momentum error plot")
    out.add_argument("--plot-constraints", metavar="PATH", help="constraint residual plot")
    out.add_argument("--save", metavar="PATH",
                     help="save the solution (.npz: exact round trip; .h5: HDF5 for other tools)")
    out.add_argument("--csv", metavar="PATH", help="observables as CSV")
    out.add_argument("--vtk", metavar="PATH", help="ParaView time series (.pvd + .vtp files)")
    anim = run.add_argument_group("animation")
    anim.add_argument("--fps", type=_positive_float, default=30.0, help="frames per second")
    anim.add_argument("--speed", type=_positive_float, default=1.0,
                      help="real-time factor (0.5 = slow motion)")
    anim.add_argument("--frames", type=_positive_int, help="exact number of frames")
    anim.add_argument("--resolution", type=_resolution, default=(640, 480),
                      help="WIDTHxHEIGHT (default 640x480)")
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
    conv.add_argument("--reference-solver", type=_solver_name, default="em")
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
    return 0


def _progress(choice: str) -> bool:
    if choice == "on":
        return True
    if choice == "off":
        return False
    return sys.stderr.isatty()


def _cmd_run(args) -> int:
    import mbs
    from mbs.gallery import load_example

    module, recommended, viz_options, title = load_example(args.target)
    solver = args.solver or recommended["solver"]
    h = args.h or recommended["h"]
    t_end = args.t_end or recommended["t_end"]
    progress = _progress(args.progress)
    system = module.build()
    if not isinstance(system, mbs.System):
        raise UsageError(f"{args.target}: build() must return an mbs.System, got "
                         f"{type(system).__name__}")
    model = system.compile()
    if not args.quiet:
        print(f"{title}\n")
        system.summary(model)
        print()
    try:
        order = {"order": args.order} if args.order != 2 else {}
        solution = mbs.simulate(model, solver, h=h, t_end=t_end, project=args.project, **order,
                                progress=progress)
    except SolverError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(solution.conservation_summary())
    report = getattr(module, "report", None)
    if callable(report):
        print(report(solution))
    _outputs(args, solution, viz_options, progress)
    return 0


def _viz_options(args, defaults: dict) -> dict:
    options = dict(defaults)
    for key in ("camera", "follow", "view"):
        value = getattr(args, key)
        if value is not None:
            options[key] = value
    if args.follow and "camera" not in options:
        options["camera"] = "follow"
    return options


def _outputs(args, solution, viz_defaults: dict, progress: bool) -> None:
    wrote = []
    if args.save:
        from mbs.io import save_hdf5, save_solution

        hdf5 = args.save.lower().endswith((".h5", ".hdf5"))
        wrote.append((save_hdf5 if hdf5 else save_solution)(solution, args.save))
    if args.csv:
        from mbs.io import save_csv

        wrote.append(save_csv(solution, args.csv))
    plots = ((args.plot, "plot_energy"), (args.plot_momentum, "plot_momentum"),
             (args.plot_constraints, "plot_constraints"))
    if any(path for path, _ in plots):
        from mbs import plots as plotting

        for path, name in plots:
            if path:
                getattr(plotting, name)(solution, path=path)
                wrote.append(path)
    if args.animate or args.snapshot or args.vtk:
        options = _viz_options(args, viz_defaults)
        if args.vtk:
            from mbs.io import save_vtk

            scene_only = {k: v for k, v in options.items()
                          if k not in ("camera", "follow", "view", "zoom", "center")}
            wrote.append(save_vtk(solution, args.vtk, fps=args.fps, speed=args.speed,
                                  frames=args.frames, **scene_only))
        if args.animate or args.snapshot:
            from mbs import viz

            if args.snapshot:
                viz.snapshot(solution, args.snapshot, time=args.time,
                             resolution=args.resolution, **options)
                wrote.append(args.snapshot)
            if args.animate:
                report = viz.animate(solution, args.animate, fps=args.fps, speed=args.speed,
                                     frames=args.frames, resolution=args.resolution,
                                     progress=progress, **options)
                print(f"animation: {report}")
    for path in wrote:
        if path != args.animate:
            print(f"wrote {path}")


def _cmd_convergence(args) -> int:
    from mbs.gallery import load_example
    from mbs.plots import convergence_study

    module, _, _, title = load_example(args.target)
    if len(args.h) < 2:
        raise UsageError("--h: give at least two step sizes, e.g. 0.004,0.002,0.001")
    t_end = args.t_end or 50.0 * max(args.h)
    print(f"{title}: convergence study\n")
    convergence_study(module.build, args.solvers, args.h, t_end,
                      reference_solver=args.reference_solver,
                      reference_factor=args.reference_factor, path=args.plot)
    if args.plot:
        print(f"wrote {args.plot}")
    return 0


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
