"""The mbs command line, in-process (main([...])) and through a subprocess."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import mbs
from mbs.cli import WARNING_LENGTH, main
from mbs.gallery import EXAMPLES


def test_help_everywhere(capsys):
    assert main(["--help"]) == 0
    assert "convergence" in capsys.readouterr().out
    for command in ("examples", "solvers", "run", "convergence"):
        assert main([command, "--help"]) == 0
        assert "usage: mbs" in capsys.readouterr().out
    assert main([]) == 2


def test_examples_and_solvers_lists(capsys):
    assert main(["examples"]) == 0
    out = capsys.readouterr().out
    for name in ("heavy-top", "dzhanibekov", "four-bar", "slider-crank", "chain"):
        assert name in out
    assert main(["solvers"]) == 0
    assert "| `em` |" in capsys.readouterr().out


def test_run_with_outputs(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    npz, png = tmp_path / "run.npz", tmp_path / "energy.png"
    code = main(["run", "pendulum-3d", "--solver", "rattle", "--h", "0.01", "--t-end", "0.05",
                 "--plot", str(png), "--save", str(npz), "--csv", str(tmp_path / "o.csv"),
                 "--quiet", "--progress", "off"])
    assert code == 0
    out = capsys.readouterr().out
    assert "solver rattle" in out and "energy" in out
    assert png.is_file() and (tmp_path / "o.csv").is_file()
    loaded = mbs.load_solution(npz)
    assert loaded.stats["solver"] == "rattle" and len(loaded.t) == 6


def test_run_animates(tmp_path, capsys):
    imageio = pytest.importorskip("imageio.v2")
    pytest.importorskip("pyvista")
    movie = tmp_path / "top.mp4"
    code = main(["run", "heavy-top", "--h", "0.01", "--t-end", "0.1", "--animate", str(movie),
                 "--fps", "20", "--resolution", "96x72", "--snapshot", str(tmp_path / "t.png"),
                 "--quiet", "--progress", "off"])
    assert code == 0
    assert "animation:" in capsys.readouterr().out
    reader = imageio.get_reader(movie)
    try:
        assert reader.count_frames() == 3  # 0.1 s at 20 fps: frames at 0, 0.05, 0.1
    finally:
        reader.close()
    assert (tmp_path / "t.png").is_file()


def test_run_a_user_script(tmp_path, capsys):
    script = tmp_path / "my_model.py"
    script.write_text(
        '"""A falling particle."""\n'
        "import mbs\n"
        "RECOMMENDED = dict(solver='em', h=0.05, t_end=0.1)\n"
        "def build():\n"
        "    system = mbs.System(gravity=(0, 0, -9.81))\n"
        "    system.add(mbs.PointMass(1.0, name='ball'))\n"
        "    return system\n"
        "def report(solution):\n"
        "    return f'fell to z = {solution.body(\"ball\").position[-1, 2]:.4f}'\n")
    assert main(["run", str(script), "--progress", "off"]) == 0
    out = capsys.readouterr().out
    assert "A falling particle." in out and "fell to z = -0.0" in out and "steps = 2" in out


def test_warnings_print_in_the_cli_style_and_long_ones_are_cut(tmp_path, capsys):
    """A model with twenty copies of one rod: compiling it warns, listing the 19 redundant
    equations removed. The command line prints that as its own one-line warning, cut to
    WARNING_LENGTH characters, without Python's source-line echo."""
    script = tmp_path / "rods.py"
    script.write_text(
        "import mbs\n"
        "RECOMMENDED = dict(solver='em', h=0.01, t_end=0.02)\n"
        "def build():\n"
        "    system = mbs.System(gravity=(0, 0, -9.81))\n"
        "    bob = system.add(mbs.PointMass(1.0, name='bob'))\n"
        "    bob.set_state(position=(1.0, 0.0, 0.0))\n"
        "    for k in range(20):\n"
        "        system.add(mbs.joints.Distance(system.ground, bob, length=1.0,\n"
        "                                       name=f'rod_with_a_long_name_{k}'))\n"
        "    return system\n")
    assert main(["run", str(script), "--progress", "off", "--quiet"]) == 0
    err = capsys.readouterr().err
    warning_lines = [line for line in err.splitlines() if "warning:" in line]
    assert len(warning_lines) == 1 and warning_lines[0].startswith("mbs run: warning: ")
    assert "redundant" in warning_lines[0] and "more characters)" in warning_lines[0]
    assert len(warning_lines[0]) < WARNING_LENGTH + 100
    assert "UserWarning" not in err and "return system.compile()" not in err


def test_bad_names_and_values(capsys, tmp_path):
    assert main(["run", "no-such-example"]) == 2
    assert "available: " in capsys.readouterr().err
    assert main(["run", "heavy-top", "--h", "-0.1"]) == 2
    assert "positive number" in capsys.readouterr().err
    assert main(["run", "heavy-top", "--h", "abc"]) == 2
    assert main(["run", "heavy-top", "--solver", "euler"]) == 2
    assert "unknown solver" in capsys.readouterr().err
    assert main(["run", "heavy-top", "--resolution", "big"]) == 2
    assert main(["convergence", "heavy-top", "--h", "0.01"]) == 2
    assert "at least two" in capsys.readouterr().err
    assert main(["convergence", "heavy-top", "--h", "0.004,0.004"]) == 2
    assert "at least two different" in capsys.readouterr().err
    assert main(["convergence", "heavy-top", "--h", "0.004,0.002,0.004"]) == 2
    assert "each step size once" in capsys.readouterr().err
    bad = tmp_path / "nobuild.py"
    bad.write_text("x = 1\n")
    assert main(["run", str(bad)]) == 2
    assert "build()" in capsys.readouterr().err


def test_convergence_command(capsys):
    code = main(["convergence", "pendulum-3d", "--solvers", "em,rattle", "--h", "0.02,0.01",
                 "--t-end", "0.2"])
    assert code == 0
    out = capsys.readouterr().out
    assert "fitted slope" in out and "rattle" in out
    rows = [line for line in out.splitlines() if line.startswith("em ")]
    errors = [float(line.split()[2]) for line in rows if "fitted" not in line]
    assert len(errors) == 2 and errors[1] < errors[0]


def test_convergence_command_passes_solver_options(capsys):
    """--option configures the studied solvers and --reference-option the reference: Lobatto
    with 3 stages (order 4) against Lobatto with 5 (order 8), on the spherical pendulum. The
    fitted slope is 4 to within the pre-asymptotic drift of two halvings (+-0.3)."""
    code = main(["convergence", "pendulum-3d", "--solvers", "lobatto", "--option", "stages=3",
                 "--h", "0.04,0.02,0.01", "--t-end", "0.4", "--reference-solver", "lobatto",
                 "--reference-option", "stages=5"])
    assert code == 0
    out = capsys.readouterr().out
    assert "against lobatto (stages=5)" in out
    (fitted,) = [line for line in out.splitlines() if line.startswith("lobatto    fitted")]
    assert abs(float(fitted.split()[3]) - 4.0) < 0.3


def test_convergence_options_that_are_settings_of_the_study_are_refused(capsys):
    for flag, key, use in (("--option", "path", "--plot"), ("--option", "h", "--h"),
                           ("--reference-option", "reference_solver", "--reference-solver")):
        assert main(["convergence", "pendulum-3d", flag, f"{key}=1", "--h", "0.04,0.02",
                     "--t-end", "0.08"]) == 2
        assert f"{key} is a setting of the study, not a solver option; use {use}" in \
            capsys.readouterr().err


def test_convergence_refuses_a_figure_type_before_running(capsys, tmp_path, monkeypatch):
    def no_run(*args, **kwargs):
        raise AssertionError("a run was made before the figure type was checked")

    monkeypatch.setattr(sys.modules["mbs.simulate"], "simulate", no_run)
    code = main(["convergence", "pendulum-3d", "--h", "0.02,0.01", "--t-end", "0.2",
                 "--plot", str(tmp_path / "study.jpg")])
    assert code == 2 and "use .png, .pdf or .svg" in capsys.readouterr().err


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mbs", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize(("source", "message"), [
    ("import mbs\ndef build():\n    return mbs.System().nonexistent()\n",
     "build() raised AttributeError: 'System' object has no attribute 'nonexistent' "
     "(line 3)"),
    ("import mbs\nscale = 1 / 0\ndef build():\n    return mbs.System()\n",
     "running the script raised ZeroDivisionError: division by zero (line 2)"),
    ("import mbs\ndef build(:\n    pass\n", "running the script raised SyntaxError")])
def test_a_failing_script_is_bad_usage_with_its_line(tmp_path, capsys, source, message):
    script = tmp_path / "broken.py"
    script.write_text(source)
    assert main(["run", str(script), "--quiet", "--progress", "off"]) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error


def test_console_script_through_subprocess():
    help_run = run_cli("--help")
    assert help_run.returncode == 0 and "examples" in help_run.stdout
    listed = run_cli("examples")
    assert listed.returncode == 0
    assert all(name in listed.stdout for name in EXAMPLES)
    ran = run_cli("run", "pendulum-3d", "--t-end", "0.03", "--h", "0.01", "--quiet")
    assert ran.returncode == 0 and "energy" in ran.stdout
    bad = run_cli("run", "pendulum-3d", "--t-end", "zero")
    assert bad.returncode == 2 and "expected a number" in bad.stderr
    assert np.isfinite(float(ran.stdout.split("E0 = ")[1].split(",")[0]))


def test_run_accepts_a_saved_model_json(tmp_path, capsys):
    import heavy_top

    from mbs.cli import main

    path = tmp_path / "top.json"
    mbs.save_system(heavy_top.build(), path)
    assert main(["run", str(path), "--t-end", "0.02", "--h", "0.002"]) == 0
    assert "energy" in capsys.readouterr().out
    (tmp_path / "bad.json").write_text('{"format": "mbs-model", "version": 7}')
    assert main(["run", str(tmp_path / "bad.json")]) != 0


FAILING_SCRIPT = '''"""A double pendulum whose load function fails after t = 0.5."""
import mbs

def guard(t):
    if t > 0.5:
        raise {error}
    return (0.0, 0.0, 0.0)

def build():
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    a = system.add(mbs.PointMass(mass=1.0, name="a"))
    b = system.add(mbs.PointMass(mass=0.5, name="b"))
    a.set_state(position=(1.0, 0.0, 0.0), velocity=(0.0, 1.5, 0.0))
    b.set_state(position=(1.0, 0.0, -0.8), velocity=(0.3, 2.5, 0.0))
    system.add(mbs.joints.Distance(system.ground, a, length=1.0, name="rod1"))
    system.add(mbs.joints.Distance(a, b, length=0.8, name="rod2"))
    system.add(mbs.forces.Load(b, force=guard, name="guard"))
    return system
'''


def test_a_failed_run_writes_its_accepted_steps(tmp_path):
    script = tmp_path / "failing.py"
    script.write_text(FAILING_SCRIPT.format(error='RuntimeError("sensor offline")'))
    npz, csv = tmp_path / "part.npz", tmp_path / "part.csv"
    ran = run_cli("run", str(script), "--h", "0.01", "--t-end", "1", "--save", str(npz),
                  "--csv", str(csv), "--quiet", "--progress", "off")
    assert ran.returncode == 1
    assert "sensor offline" in ran.stderr and "error.solution" not in ran.stderr
    assert f"the 50 accepted steps (t = 0 to 0.5) were written to {npz}, {csv}" in ran.stderr
    partial = mbs.load_solution(npz)
    assert len(partial.t) == 51 and partial.t[-1] == pytest.approx(0.5)
    assert partial.stats["completed"] is False
    assert len(csv.read_text().splitlines()) == 52  # header and one row per node


def test_an_interrupted_run_writes_its_steps_and_exits_130(tmp_path, capsys):
    script = tmp_path / "interrupted.py"
    script.write_text(FAILING_SCRIPT.format(error="KeyboardInterrupt"))
    npz = tmp_path / "part.npz"
    code = main(["run", str(script), "--h", "0.01", "--t-end", "1", "--save", str(npz),
                 "--quiet", "--progress", "off"])
    assert code == 130
    assert "interrupted" in capsys.readouterr().err
    assert len(mbs.load_solution(npz).t) == 51


def test_stages_and_solver_options_reach_the_solver(tmp_path):
    import pendulum_3d

    model = pendulum_3d.build().compile()
    runs = {"lobatto": (["--stages", "4"], {"stages": 4}),
            "hbvm": (["--option", "s=3", "--option", "k=6"], {"s": 3, "k": 6})}
    for solver, (flags, options) in runs.items():
        npz = tmp_path / f"{solver}.npz"
        assert main(["run", "pendulum-3d", "--solver", solver, "--h", "0.02", "--t-end", "0.1",
                     *flags, "--save", str(npz), "--quiet", "--progress", "off"]) == 0
        expected = mbs.simulate(model, solver, h=0.02, t_end=0.1, **options)
        assert np.array_equal(mbs.load_solution(npz).q, expected.q)


def test_order_help_and_misplaced_orders(capsys):
    from mbs.solvers import REGISTRY, make_solver

    assert main(["run", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    order_help = help_text.split("--order {2,4,6} ")[-1].split("--stages")[0]
    composable = [name for name in REGISTRY if make_solver(name).composable]
    assert "ggl-vi-a" in composable
    for name in REGISTRY:
        assert (name in order_help.replace(",", " ").split()) == (name in composable)
    assert main(["run", "pendulum-3d", "--solver", "lobatto", "--order", "4"]) == 2
    assert "--stages 3" in capsys.readouterr().err
    assert main(["run", "pendulum-3d", "--solver", "em", "--stages", "3"]) == 2
    assert "lobatto" in capsys.readouterr().err


def test_lie_group_solvers_run_on_the_lie_group_formulation(tmp_path, capsys):
    npz = tmp_path / "top.npz"
    assert main(["run", "heavy-top", "--solver", "vrkmk", "--option", "tableau=gauss-1",
                 "--h", "0.01", "--t-end", "0.03", "--save", str(npz), "--quiet",
                 "--progress", "off"]) == 0
    saved = mbs.load_solution(npz)
    assert saved.stats["formulation"] == "lie-group"
    assert saved.stats["solver"].startswith("vrkmk-gauss-1")
    assert main(["run", "pendulum-3d", "--solver", "vcg", "--quiet"]) == 2
    assert "director solver" in capsys.readouterr().err
    assert main(["solvers"]) == 0
    assert "tableau=NAME" in capsys.readouterr().out


@pytest.mark.parametrize(("flag", "path", "allowed"), [
    ("--animate", "movie.xyz", ".mp4"), ("--snapshot", "still.xyz", ".png"),
    ("--plot", "energy.jpg", ".svg"), ("--plot-constraints", "c", ".pdf"),
    ("--csv", "observables.npz", ".csv"), ("--save", "run.txt", ".npz"),
    ("--vtk", "frames.vtu", ".pvd")])
def test_output_file_types_are_checked_before_simulating(tmp_path, capsys, flag, path,
                                                         allowed):
    code = main(["run", "pendulum-3d", "--t-end", "0.05", "--h", "0.01", flag,
                 str(tmp_path / path), "--quiet", "--progress", "off"])
    assert code == 2
    captured = capsys.readouterr()
    assert "steps =" not in captured.out  # no conservation summary: nothing was simulated
    assert flag in captured.err and allowed in captured.err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("flag, name", [("--animate", "movie.gif"), ("--save", "run.npz"),
                                        ("--plot", "energy.png"), ("--csv", "run.csv")])
def test_unwritable_outputs_are_refused_before_simulating(tmp_path, capsys, flag, name):
    (tmp_path / "plainfile").write_text("not a directory")
    code = main(["run", "pendulum-3d", "--t-end", "0.05", "--h", "0.01", flag,
                 str(tmp_path / "plainfile" / name), "--quiet", "--progress", "off"])
    assert code == 2
    captured = capsys.readouterr()
    assert "steps =" not in captured.out  # nothing was simulated
    assert flag in captured.err and "choose a writable location" in captured.err


@pytest.mark.parametrize(("arguments", "message"), [
    (["--time", "3", "--snapshot", "still.png"], "outside the run"),
    (["--time", "0.02"], "--snapshot"),
    (["--follow", "nobody", "--animate", "movie.gif"], "bodies: bob"),
    (["--animate", "movie.gif", "--fps", "100"], "too high for a GIF"),
    (["--follow", "bob", "--camera", "fixed", "--animate", "movie.mp4"],
     "give --camera follow"),
    # t_end = 0.054 with h = 0.01: the run ends at 0.05 (5 steps)
    (["--time", "0.053", "--snapshot", "still.png", "--t-end", "0.054"], "t = 0 to 0.05")])
def test_view_options_are_checked_before_simulating(tmp_path, capsys, arguments, message):
    arguments = [str(tmp_path / a) if a.endswith((".png", ".gif", ".mp4")) else a
                 for a in arguments]
    code = main(["run", "pendulum-3d", "--t-end", "0.05", "--h", "0.01", *arguments,
                 "--quiet", "--progress", "off"])
    assert code == 2
    captured = capsys.readouterr()
    assert "steps =" not in captured.out
    assert message in captured.err
    assert not any(tmp_path.iterdir())


def test_examples_answer_to_their_module_names(capsys):
    assert main(["run", "pendulum_3d", "--t-end", "0.02", "--h", "0.01", "--quiet",
                 "--progress", "off"]) == 0
    assert "steps =" in capsys.readouterr().out


def test_a_script_may_register_its_own_scheme(tmp_path, capsys, monkeypatch):
    """``--solver`` is checked after the script is loaded, so a scheme the script adds to
    mbs.solvers.REGISTRY runs from the command line."""
    monkeypatch.setattr(mbs.solvers, "REGISTRY", dict(mbs.solvers.REGISTRY))
    script = tmp_path / "own_scheme.py"
    script.write_text(
        "import mbs\n"
        "from mbs.solvers import Rattle\n\n"
        "class Leapfrog(Rattle):\n"
        "    pass\n\n"
        "mbs.solvers.REGISTRY['leapfrog'] = Leapfrog\n\n"
        "def build():\n"
        "    system = mbs.System(gravity=(0.0, 0.0, -9.81))\n"
        "    bob = system.add(mbs.PointMass(1.0, name='bob'))\n"
        "    bob.set_state(position=(1.0, 0.0, 0.0))\n"
        "    system.add(mbs.joints.Distance(system.ground, bob, length=1.0))\n"
        "    return system\n")
    assert main(["run", str(script), "--solver", "leapfrog", "--h", "0.01", "--t-end", "0.05",
                 "--quiet", "--progress", "off"]) == 0
    assert "steps =" in capsys.readouterr().out
    assert main(["run", str(script), "--solver", "leapfrogs", "--quiet"]) == 2
    assert "leapfrog" in capsys.readouterr().err


def test_a_scripts_viz_may_set_the_rendering_settings(tmp_path, capsys):
    """VIZ's fps and resolution are used (the flags take precedence), not given twice."""
    pytest.importorskip("pyvista")
    script = tmp_path / "ball.py"
    script.write_text(
        "import mbs\n"
        "RECOMMENDED = dict(solver='em', h=0.05, t_end=0.3)\n"
        "VIZ = dict(view='front', fps=10, resolution=(64, 48))\n"
        "def build():\n"
        "    system = mbs.System(gravity=(0, 0, -9.81))\n"
        "    system.add(mbs.PointMass(1.0, name='ball'))\n"
        "    return system\n")
    movie, still = tmp_path / "ball.gif", tmp_path / "ball.png"
    assert main(["run", str(script), "--animate", str(movie), "--snapshot", str(still),
                 "--quiet", "--progress", "off"]) == 0
    out = capsys.readouterr().out
    assert "at 10 fps, 64x48" in out and f"wrote {still}" in out
    assert main(["run", str(script), "--animate", str(movie), "--fps", "20", "--quiet",
                 "--progress", "off"]) == 0
    assert "at 20 fps, 64x48" in capsys.readouterr().out


def test_camera_flags_take_precedence_over_the_scripts_viz(tmp_path, capsys):
    """--follow turns the script's fixed camera into a following one, and --camera fixed
    drops the script's followed body, instead of reporting a conflict the user never wrote."""
    pytest.importorskip("pyvista")
    script = tmp_path / "ball.py"
    script.write_text(
        "import mbs\n"
        "RECOMMENDED = dict(solver='em', h=0.05, t_end=0.1)\n"
        "VIZ = dict(camera='fixed', resolution=(64, 48))\n"
        "def build():\n"
        "    system = mbs.System(gravity=(0, 0, -9.81))\n"
        "    system.add(mbs.PointMass(1.0, name='ball'))\n"
        "    return system\n")
    still = tmp_path / "ball.png"
    assert main(["run", str(script), "--follow", "ball", "--snapshot", str(still), "--quiet",
                 "--progress", "off"]) == 0
    script.write_text(script.read_text().replace("camera='fixed'",
                                                 "camera='follow', follow='ball'"))
    assert main(["run", str(script), "--camera", "fixed", "--snapshot", str(still),
                 "--quiet", "--progress", "off"]) == 0
    assert still.exists()
