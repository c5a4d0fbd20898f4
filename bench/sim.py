"""WireCAP's experiments in weir's virtual-time model (`weir sim`), with plots.

1. Burst experiment (WireCAP Figures 7 to 9): one queue, bursts of P 64-byte
   packets at 14.88 Mpps, a light and a heavy application, for a ring-only
   engine, a copy-into-buffer engine and weir's pool in several shapes.
   Writes bench/results/sim-burst.csv and sim-burst.png.
2. Long-term imbalance (WireCAP Table 1 and Figure 10): 6 queues and 6 heavy
   workers under a skewed flow mix whose total load fits the workers but whose
   hottest queue's does not. Writes bench/results/sim-imbalance.csv and
   sim-imbalance.png.

The model is deterministic, so one run per point is the measurement. Plots
need matplotlib (installed with pip on first use).
"""
import csv
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import RESULTS, WEIR, log  # noqa: E402


def pyplot():
    try:
        import matplotlib
    except ImportError:
        log("installing matplotlib for the plots")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "matplotlib"], check=True)
        import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def experiment(name):
    """Run `weir sim NAME` into bench/results/sim-NAME.csv; return its prefix and rows."""
    prefix = RESULTS / f"sim-{name}"
    subprocess.run([str(WEIR), "sim", name, "-o", str(prefix)], check=True)
    with open(prefix.with_suffix(".csv")) as f:
        return prefix, list(csv.DictReader(f))


def save(fig, prefix):
    fig.tight_layout()
    fig.savefig(prefix.with_suffix(".png"), dpi=110)
    log(f"wrote {prefix.with_suffix('.png')}")


def burst():
    prefix, rows = experiment("burst")
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    for ax, app in zip(axes, ("light", "heavy")):
        engines = dict.fromkeys(r["engine"] for r in rows if r["app"] == app)
        for e in engines:
            pts = sorted((int(r["burst"]), float(r["drop_rate"]) * 100) for r in rows if r["app"] == app and r["engine"] == e)
            ax.plot([p for p, _ in pts], [d for _, d in pts], marker="o", label=e)
        cost = next(r["cost_ns"] for r in rows if r["app"] == app)
        ax.set_xscale("log")
        ax.set_title(f"{app} application ({cost} ns/packet), one queue, 14.88 Mpps bursts")
        ax.set_xlabel("burst size P (packets)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("drop rate (%)")
    save(fig, prefix)
    return rows


def imbalance():
    prefix, rows = experiment("imbalance")
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 5))
    names = [r["engine"] for r in rows]
    series = [
        ("drop rate (%)", [float(r["drop_rate"]) * 100 for r in rows]),
        ("flows that changed worker", [int(r["flows_changed_worker"]) for r in rows]),
        ("reorder events", [int(r["reorder_events"]) for r in rows]),
    ]
    for ax, (title, values) in zip(axes, series):
        ax.bar(range(len(names)), values, color="tab:blue")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("6 queues, 6 heavy workers, skewed flows at 85% of total capacity")
    save(fig, prefix)
    return rows


def main():
    if not WEIR.exists():
        sys.exit(f"{WEIR} not found: build with `cargo build --release -p weir-cli` first")
    which = sys.argv[1:] or ["burst", "imbalance"]
    if "burst" in which:
        burst()
    if "imbalance" in which:
        imbalance()


if __name__ == "__main__":
    main()
