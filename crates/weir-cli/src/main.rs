//! `weir`: capture, count, record and synthesize packet traces.
//!
//! Exit codes: 0 success; 2 bad input (arguments, filter expression, malformed
//! trace), with the packets read before the damage still counted; 1 any other
//! failure; 130 after a second Ctrl-C.

mod alloc;
mod args;
mod count;
mod event_types;
mod events;
mod exit;
mod flow_order;
mod flows;
mod forward;
mod handle;
mod inspect;
mod kafka;
mod man;
mod metrics;
mod notify;
mod profile;
mod queues;
mod record;
mod replay;
mod run;
mod sensor;
mod sim;
mod streams;
mod synth;
mod wrap;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "Packet capture and delivery for passive network monitoring",
    long_about = "weir captures packets for passive network monitoring: from a live interface \
(AF_PACKET, AF_XDP or its own XDP program) or a trace file, it splits them across queues by a \
symmetric RSS hash so both directions of a flow stay together, keeps them in a per-queue pool of \
chunks that absorbs bursts, and hands them to one worker per queue. On the workers it records \
packets (record), exports flow records (flows), reassembles TCP streams (streams), matches rules \
(inspect), or does all of these from one capture as a service (sensor, from a config file); \
unmodified libpcap programs run on it with weir run.\n\n\
SOURCE names: `trace.pcap` (one queue), `trace.pcap@0-3` (split into 4 queues by RSS), \
`trace.pcap@2` (queue 2 of 3), `file:PATH[@RANGE]` for paths that contain '@', `-` for stdin; \
live interfaces: `afpacket:IF[@RANGE]` (or a bare `IF`), `afxdp:IF[@RANGE]` (AF_XDP, a socket per RX queue), \
`xdp:IF[@RANGE]` (weir's XDP program copies packets into one packed ring buffer; the host keeps them).",
    after_help = "Examples:\n  weir synth -o /tmp/t.pcap --packets 1000000 --flows 100000\n  weir count /tmp/t.pcap@0-1\n  \
weir count -f 'tcp port 443' --json /tmp/t.pcap\n  weir record /tmp/t.pcap -f udp -w /tmp/udp-%H%M%S.pcapng -G 60"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Count packets and bytes per queue, with rates and drops once a second (the pfcount of weir).
    Count(count::CountArgs),
    /// Write what a source delivers to pcap or pcapng files, with rotation.
    Record(record::RecordArgs),
    /// Send the packets of a trace out of a network interface, at top speed or paced (the tcpreplay of weir).
    Replay(replay::ReplayArgs),
    /// Forward packets from one interface out of another (or back out of the same), inline, through a filter; --bidirectional for a bump in the wire.
    Forward(forward::ForwardArgs),
    /// Build a large, realistic trace for benchmarks (built-in model, or flows taken from real traces).
    Synth(synth::SynthArgs),
    /// Simulate a multi-queue NIC and its cores in virtual time: WireCAP's burst and imbalance experiments.
    Sim(sim::SimArgs),
    /// Run a libpcap filter N times on every packet, then discard it: a heavy application of known cost (WireCAP's pkt_handler).
    Handle(handle::HandleArgs),
    /// Reassemble TCP streams (and track UDP ones) on the workers: files as tcpflow writes them, JSON records, cutoffs (Scap's stream capture).
    Streams(streams::StreamsArgs),
    /// Export flow records to collectors over UDP: IPFIX, NetFlow v9 or v5 (the softflowd of weir, on the stream layer).
    Flows(flows::FlowsArgs),
    /// Match signatures per service port and keep per-flow counters: an IDS workload whose caches locality buffering helps.
    Inspect(inspect::InspectArgs),
    /// Run a sensor from a config file: one capture feeding packet files, flow export, streams, rule alerts, EVE events and metrics, as a service.
    Sensor(sensor::SensorArgs),
    /// Packets per queue in 10 ms bins, as a CSV and a PNG plot: how evenly the queues share the load (WireCAP's queue_profiler).
    Queues(queues::QueuesArgs),
    /// Run count, handle, inspect, streams or flows, or a libpcap program with run, with stage timing on, and show per stage the cycles and ns per packet and the share of the process's CPU time (WinPcap's profile of the packet path).
    Profile(profile::ProfileArgs),
    /// Run an unmodified libpcap program (tcpdump, softflowd, fprobe, ...) on weir's libpcap, with weir's options, and report weir's per-queue counters when it exits.
    Run(wrap::WrapArgs),
    /// Write the man pages (weir.1 and one per command) into DIR, from the same definitions as --help.
    #[command(hide = true)]
    Man(man::ManArgs),
}

fn main() -> ExitCode {
    alloc::tune();
    let cli = Cli::parse();
    exit::report(dispatch(cli.command))
}

/// Run one command (`weir profile` runs the command it profiles through here too).
pub(crate) fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Count(a) => count::run(a),
        Command::Record(a) => record::run(a),
        Command::Replay(a) => replay::run(a),
        Command::Forward(a) => forward::run(a),
        Command::Synth(a) => synth::run(a),
        Command::Sim(a) => sim::run(a),
        Command::Handle(a) => handle::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Streams(a) => streams::run(a),
        Command::Flows(a) => flows::run(a),
        Command::Sensor(a) => sensor::run(a),
        Command::Queues(a) => queues::run(a),
        Command::Profile(a) => profile::run(a),
        Command::Run(a) => wrap::run(a),
        Command::Man(a) => man::run(a),
    }
}

#[cfg(test)]
mod tests {
    /// clap checks its arguments (unique ids, valid defaults) only when a
    /// command is built; this builds every command, so a clash between
    /// flattened option groups fails here rather than at a user's first run.
    #[test]
    fn every_command_line_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
