"""The fleet simulation: bench/bench_fleet.py prints its table; tests/unit/test_fleet_smoke.py runs 50 agents."""
