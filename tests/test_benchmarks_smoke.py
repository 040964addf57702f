"""The benchmark runner keeps working (smoke run of its quick subset, peers off)."""

from __future__ import annotations

import json

from benchmarks.runner import main


def test_quick_benchmark_run_writes_json(tmp_path, capsys):
    path = tmp_path / "bench.json"
    main(["--quick", "--no-peers", "--json", str(path)])
    data = json.loads(path.read_text())
    assert data and "heavy" in capsys.readouterr().out.lower()
