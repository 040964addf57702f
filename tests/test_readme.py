"""The README's example runs and its claims about conservation hold."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

import mbs

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_example_runs_and_conserves(capsys):
    code = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    solution = namespace["solution"]
    energy = solution.energy()
    assert np.max(np.abs(energy - energy[0])) / abs(energy[0]) <= 1e-12
    assert namespace["model"].degrees_of_freedom == 3
    assert "degrees of freedom = 3" in capsys.readouterr().out


def test_readme_starts_with_the_two_commands():
    lines = README.read_text().splitlines()
    block = lines[lines.index("```bash") + 1:lines.index("```bash") + 3]
    assert "examples/demo.py" in block[0]
    assert "pytest" in block[1]


def test_readme_solver_table_is_the_generated_one():
    """The README's solver table is mbs.solvers.solver_table() (one source: the properties
    each scheme declares)."""
    text = README.read_text()
    start = text.index("<!-- solver-table")
    body = text[text.index("\n", start) + 1:text.index("<!-- /solver-table -->")]
    assert body.strip() == mbs.solvers.solver_table().strip()
