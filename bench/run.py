"""Run every benchmark in bench/. Results go to bench/results/ as JSON."""
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
BENCHES = ["count"]

for name in sys.argv[1:] or BENCHES:
    print(f"== {name}", flush=True)
    runpy.run_path(str(HERE / f"{name}.py"), run_name="__main__")
