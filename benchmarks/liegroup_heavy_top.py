"""Heavy top: CPU seconds to a centre-of-mass error, Lie-group formulation against directors.

    python -m benchmarks.liegroup_heavy_top                    # full sweep, a few minutes
    python -m benchmarks.liegroup_heavy_top --quick            # 0.25 s CPU per run
    python -m benchmarks.liegroup_heavy_top --json /tmp/lg.json --no-peers

The problem, error measure, step sequence and CPU accounting are those of
``benchmarks/work_precision.py``: the heavy top of ``examples/heavy_top.py`` in steady
precession, error |phi(1) - phi_exact(1)| / l against the exact precession, h = h0 / 2^k from
h0 = 1/64, ``time.process_time`` around the integration only (models compiled beforehand, one
untimed warm-up run per curve, runs under 0.5 s repeated and the least CPU kept), CPU to an
error interpolated log-log between bracketing runs. The same System is compiled twice:

* ``formulation="lie-group"``: the top's rotation on SO(3) about its pivot (3 degrees of
  freedom, no constraints), integrated by VRKMK (Gauss 1-3 stages; order 2, 4, 6) and VCG
  (triple jump; order 4) of Bogfjellmo and Marthinsen (2014);
* ``formulation="director"``: the director schemes that were fastest to 1e-6 and 1e-10 in
  ``docs/work-precision.md`` (Lobatto IIIA-IIIB with 3 and 4 stages and composed EM of order 6,
  numba backend).

Exudyn's configurations (``peers.EXUDYN_COM_CONFIGS``) run in the same process when exudyn can
be imported; its renderer is never started.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import mbs
from benchmarks import cases, peers, timing
from benchmarks import work_precision as wp

#: (label, formulation, solver, options, order)
SCHEMES = (
    ("lie-group vrkmk gauss-1", "lie-group", "vrkmk", {"tableau": "gauss-1"}, 2),
    ("lie-group vrkmk gauss-2 (VRKMK4)", "lie-group", "vrkmk", {"tableau": "gauss-2"}, 4),
    ("lie-group vrkmk gauss-3 (VRKMK6)", "lie-group", "vrkmk", {"tableau": "gauss-3"}, 6),
    ("lie-group vcg triple-jump", "lie-group", "vcg", {"composition": "triple-jump"}, 4),
    ("director lobatto s=3 compiled", "director", "lobatto",
     {"stages": 3, "backend": "compiled"}, 4),
    ("director lobatto s=4 compiled", "director", "lobatto",
     {"stages": 4, "backend": "compiled"}, 6),
    ("director em order 6 compiled", "director", "em", {"order": 6, "backend": "compiled"}, 6),
)
QUICK_SCHEMES = ("lie-group vrkmk gauss-2 (VRKMK4)", "lie-group vrkmk gauss-3 (VRKMK6)",
                 "director lobatto s=4 compiled")
HEADLINE = wp.HEADLINE_ERRORS


def timed_run(model, solver: str, options: dict) -> Callable[[float], dict]:
    """CPU seconds of ``mbs.simulate(model, solver, h=h, t_end=1, **options)`` and the
    heavy top's centre-of-mass error (:func:`timing.mbs_timed_run`)."""
    def measure(solution: mbs.Solution) -> dict:
        return {**timing.heavy_top_com_measure(solution),
                **wp.run_facts(solution, momentum_axis=2)}

    return timing.mbs_timed_run(model, solver, wp.T_END, measure, **options)


def mbs_curve(models: dict, scheme: tuple, budget: float) -> dict:
    label, formulation, solver, options, order = scheme
    timing.log(f"  {label}")
    run = timed_run(models[formulation], solver, options)
    run(wp.HEAVY_TOP_H0)  # warm-up (numba kernels of the compiled backend)
    curve = {"code": "mbs", "scheme": label, "formulation": formulation, "solver": solver,
             "options": dict(options), "order": order}
    return wp.summarize({**curve, **wp.sweep(run, wp.HEAVY_TOP_H0, budget)})


def measure(schemes, budget: float, use_exudyn: bool | None) -> dict:
    system = cases.heavy_top()
    models = {"director": system.compile(), "lie-group": system.compile(formulation="lie-group")}
    exudyn_ok, exudyn_info = peers.exudyn_status()
    use = exudyn_ok if use_exudyn is None else (use_exudyn and exudyn_ok)
    problem = wp.heavy_top_problem()
    started, cpu_started = time.perf_counter(), time.process_time()
    curves = [mbs_curve(models, scheme, budget) for scheme in schemes]
    curves += [wp.exudyn_curve(problem, config, budget, use,
                               exudyn_info if not exudyn_ok else "Exudyn disabled")
               for config in peers.EXUDYN_COM_CONFIGS]
    return {"curves": curves, "budget_s": budget,
            "exudyn": exudyn_info if use else "not run",
            "wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu_started}


def report(result: dict) -> list[str]:
    problem = {"curves": result["curves"]}
    lines = [f"Heavy top, CoM error |phi(1) - phi_exact(1)| / l; h = 1/64 / 2^k; CPU = "
             f"time.process_time of the integration; budget {result['budget_s']:g} s per run; "
             f"Exudyn {result['exudyn']}", ""]
    lines += wp.points_table(problem)
    lines.append("")
    lines += wp.summary_table(problem)
    lines.append("")
    for error in HEADLINE:
        key = f"{error:g}"
        found = [(c["cpu_at"][key], c["scheme"]) for c in result["curves"]
                 if c.get("cpu_at", {}).get(key) is not None]
        lines.append(f"CPU to CoM error {key}: " + "; ".join(
            f"{scheme} {wp.fmt_cpu(cpu)}" for cpu, scheme in sorted(found)))
    lines.append(f"total: wall {result['wall_s']:.0f} s, CPU {result['cpu_s']:.0f} s")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.liegroup_heavy_top",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{wp.QUICK_BUDGET_S:g} s CPU per run and three schemes")
    parser.add_argument("--budget", type=float, help="CPU seconds one run may take")
    parser.add_argument("--peers", action=argparse.BooleanOptionalAction, default=None,
                        help="run Exudyn (default: when it can be imported)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    budget = args.budget or (wp.QUICK_BUDGET_S if args.quick else wp.BUDGET_S)
    schemes = [s for s in SCHEMES if not args.quick or s[0] in QUICK_SCHEMES]
    machine = timing.machine_info()
    result = measure(schemes, budget, args.peers)
    machine.update(exudyn=result["exudyn"], loadavg_end=os.getloadavg())
    print("\n".join([wp.machine_line(machine), *report(result)]), flush=True)
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        document = {"command": ["python", "-m", "benchmarks.liegroup_heavy_top",
                                *(sys.argv[1:] if argv is None else argv)],
                    "machine": machine, **result}
        path.write_text(json.dumps(timing.jsonable(document), indent=1))
        print(f"JSON written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
