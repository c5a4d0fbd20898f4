"""Run every benchmark in bench/. Results go to bench/results/ as JSON."""
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
BENCHES = ["count", "streams", "flows", "jit", "python"]

failed = []
for name in sys.argv[1:] or BENCHES:
    print(f"== {name}", flush=True)
    script = str(HERE / f"{name}.py")
    sys.argv = [script]  # each benchmark parses its own (empty) arguments
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:  # the scripts end with sys.exit(main())
        if e.code not in (None, 0):
            print(f"== {name} failed: {e.code}", file=sys.stderr, flush=True)
            failed.append(name)
sys.exit(f"failed: {', '.join(failed)}" if failed else 0)
