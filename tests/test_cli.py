"""The mbs command line, in-process (main([...])) and through a subprocess."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import mbs
from mbs.cli import main
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
        assert reader.count_frames() == 2
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


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mbs", *args], capture_output=True,
                          text=True, timeout=120)


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
