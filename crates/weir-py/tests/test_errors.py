"""Bad input becomes a weir.Error subclass carrying the message the CLI
prints (and whose exit code 2 is exactly weir.BadInputError); a refused
privilege is weir.MissingCapabilityError naming the capability."""

import glob
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import weir
from conftest import CORPUS, corpus_path


def cli_error(cli, *args):
    """The CLI's exit code and its message without the `weir: ` prefix."""
    out = cli(*args, check=False)
    return out.returncode, out.stderr.strip().removeprefix("weir: ")


def test_malformed_traces_raise_the_clis_message(cli):
    traces = sorted(glob.glob(corpus_path("malformed/libpcap") + "/*"))
    traces += sorted(glob.glob(corpus_path("malformed/pcapng-generator/output_le/difficult") + "/*.pcapng"))
    checked = 0
    for t in traces:
        code, msg = cli_error(cli, "count", "--json", t)
        if code == 0:
            continue
        assert code == 2, msg
        for f in (weir.count, weir.flows):
            with pytest.raises(weir.MalformedTraceError) as e:
                f(t)
            assert isinstance(e.value, weir.BadInputError)
            assert str(e.value) == msg
        with pytest.raises(weir.MalformedTraceError, match="byte offset"):
            list(weir.packets(t))
        checked += 1
    assert checked >= 5, "the malformed corpus has fewer bad traces than expected"


def test_a_trace_cut_short_raises_after_the_packets_before_the_damage(synth, cli, tmp_path):
    cut = tmp_path / "cut.pcap"
    data = open(synth, "rb").read()
    cut.write_bytes(data[: len(data) // 2 + 7])
    code, msg = cli_error(cli, "count", "--json", cut)
    assert code == 2
    with pytest.raises(weir.MalformedTraceError) as e:
        weir.count(cut)
    assert str(e.value) == msg.splitlines()[-1]
    report = e.value.result
    assert 0 < report.packets < 20000 and report.stop == "failed"
    got = []
    with pytest.raises(weir.MalformedTraceError):
        for p in weir.packets(cut):
            got.append(p.wire_len)
    assert (len(got), sum(got)) == (report.packets, report.bytes)


def test_a_bad_filter_raises_libpcaps_message(synth, cli):
    code, msg = cli_error(cli, "count", "-f", "tcp port 99999", synth)
    assert code == 2
    for f in (weir.count, weir.packets, weir.flows, weir.streams):
        with pytest.raises(weir.FilterError) as e:
            f(synth, filter="tcp port 99999")
        assert str(e.value) == msg


def test_bad_sources_and_options_name_what_is_wrong(synth, tmp_path):
    with pytest.raises(weir.BadInputError, match="no such file or network interface"):
        weir.count(tmp_path / "none.pcap")
    with pytest.raises(weir.NoSuchDeviceError, match="no network interface"):
        weir.count("afpacket:nosuchif0")
    with pytest.raises(weir.BadInputError, match=r"^snaplen: 0 is out of range"):
        weir.count(synth, snaplen=0)
    with pytest.raises(weir.BadInputError, match=r"^pool: "):
        weir.count(synth, pool="0,4")
    with pytest.raises(weir.BadInputError, match=r"^balance: "):
        weir.count(synth, balance="sideways")
    with pytest.raises(weir.BadInputError, match="give one of them"):
        weir.count(synth, pps=10, speed=2)
    with pytest.raises(weir.BadInputError, match=r"^queues: .*names its queues already"):
        weir.count(synth + "@0-1", queues=2)
    with pytest.raises(weir.BadInputError, match=r"^timestamps: .*is a trace"):
        weir.count(synth, timestamps="tsc")
    with pytest.raises(weir.BadInputError, match=r"^stream layer: the piece overlap"):
        weir.streams(synth, piece=100, piece_overlap=100)
    with pytest.raises(TypeError, match="unexpected keyword argument 'queue'"):
        weir.count(synth, queue=2)
    with pytest.raises(TypeError, match="snaplen must be an int, not str"):
        weir.packets(synth, snaplen="big")


def test_a_pool_tuple_out_of_range_is_told_so_and_a_bytes_source_is_taken(synth):
    with pytest.raises(weir.BadInputError, match=r'^pool: "-1,5": '):
        weir.count(synth, pool=(-1, 5))
    with pytest.raises(TypeError, match=r"pool must be a str .* of ints, not tuple"):
        weir.count(synth, pool=(1.5, 5))
    # The TypeError for None names bytes among what a source may be: they are taken.
    with pytest.raises(TypeError, match="str, bytes or os.PathLike"):
        weir.count(None)
    assert weir.count(os.fsencode(synth)).packets == weir.count(synth).packets == 20000


def _no_net_raw(code: str):
    """Runs `code` in a Python without CAP_NET_RAW: as root, under setpriv."""
    cmd = [sys.executable, "-c", code]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.fail("needs setpriv (util-linux) to drop CAP_NET_RAW as root")
        cmd = [setpriv, "--inh-caps=-net_raw", "--bounding-set=-net_raw", "--", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_a_live_source_without_cap_net_raw_raises_missing_capability():
    code = textwrap.dedent(
        """
        import weir
        caps = int(next(l for l in open("/proc/self/status") if l.startswith("CapEff:")).split()[1], 16)
        assert not caps & (1 << 13), f"still holds CAP_NET_RAW: {caps:x}"
        try:
            weir.count("afpacket:lo", duration=0.1)
        except weir.MissingCapabilityError as e:
            print("refused:", e)
        """
    )
    out = _no_net_raw(code)
    assert out.returncode == 0, out.stderr
    assert "refused: afpacket:lo: opening a packet socket: packet sockets need CAP_NET_RAW" in out.stdout, out.stdout
