"""What the tests share: the real `weir` CLI to compare with, a trace it
synthesizes, and the shared corpus beside the clone (../shared/corpus).

The CLI is WEIR_BIN, or target/release/weir (then target/debug/weir) of the
workspace; `make python` builds it and says which. A test that needs the
corpus, or the CLI, and finds it missing fails and says so.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CORPUS = ROOT.parent / "shared" / "corpus"
ZEEK = CORPUS / "zeek-traces"


def _target_dir() -> Path:
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=ROOT, capture_output=True, text=True
    )
    if out.returncode == 0:
        return Path(json.loads(out.stdout)["target_directory"])
    return ROOT / "target"


@pytest.fixture(scope="session")
def weir_bin() -> str:
    env = os.environ.get("WEIR_BIN")
    if env:
        if not os.access(env, os.X_OK):
            pytest.fail(f"WEIR_BIN={env} is not an executable")
        return env
    target = _target_dir()
    for profile in ("release", "debug"):
        p = target / profile / "weir"
        if p.exists():
            return str(p)
    pytest.fail(f"no weir CLI in {target}/release or debug: build it (cargo build --release -p weir-cli) or set WEIR_BIN")


@pytest.fixture(scope="session")
def cli(weir_bin):
    """Runs `weir ARGS...`; returns the CompletedProcess (text)."""

    def run(*args, check=True):
        out = subprocess.run([weir_bin, *map(str, args)], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if check and out.returncode != 0:
            pytest.fail(f"weir {' '.join(map(str, args))} exited {out.returncode}: {out.stderr}")
        return out

    return run


@pytest.fixture(scope="session")
def cli_json(cli):
    """`weir count --json ARGS...` as a dict."""

    def run(*args):
        return json.loads(cli("count", "--json", *args).stdout)

    return run


@pytest.fixture(scope="session")
def synth(cli, tmp_path_factory) -> str:
    """A realistic trace `weir synth` makes: 20,000 packets, 400 flows open at once."""
    path = tmp_path_factory.mktemp("synth") / "synth.pcap"
    cli("synth", "-o", path, "--packets", 20000, "--flows", 400, "--seed", 7)
    return str(path)


def corpus_path(rel: str) -> str:
    p = CORPUS / rel
    if not p.exists():
        pytest.fail(f"needs the corpus in ../shared/corpus: {p} is missing")
    return str(p)


@pytest.fixture(scope="session")
def http_trace() -> str:
    """A real HTTP trace: two TCP connections, 1,556 packets."""
    return corpus_path("zeek-traces/http/206_example_b.pcap")


@pytest.fixture(scope="session")
def fragments_trace() -> str:
    """A real trace with IPv4 fragments, some of datagrams that never complete."""
    return corpus_path("zeek-traces/tunnels/gtp/gtp1_gn_normal_incl_fragmentation.pcap")


@pytest.fixture(scope="session")
def pcapng_trace() -> str:
    """A real pcapng trace."""
    return corpus_path("zeek-traces/irc-dcc-send.pcapng")
