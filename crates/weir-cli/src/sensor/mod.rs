//! `weir sensor CONFIG.toml`: one capture feeding every output, run as a
//! service from a config file ([`config`] reads it).
//!
//! Per queue, one worker runs a [`Tee`](weir::output::tee::Tee) whose
//! branches are the enabled outputs, each behind its own filter. The
//! outputs are composed in [`output`]: each is one file there, and the run
//! knows none by name.
//! - `[record]`: the packets into rotating pcap or pcapng files, as
//!   `weir record` writes them (its handler and writer);
//! - `[flows]`: a flows-mode stream layer (statistics only) whose records go
//!   to `weir flows`' exporters ([`crate::flows::FlowOutput`]) and to the
//!   events as `flow` events;
//! - `[streams]` and `[inspect]`: one reassembling stream layer, whose data
//!   goes to tcpflow-style files (`weir streams`' writer) and to the rules'
//!   matcher (alerts as events), and whose closed streams go to the events.
//!   The two share the layer, so its settings are `[streams]`'.
//!
//! Every output opens its files after root is dropped, and no packet
//! reaches a branch before all of them are open.
//!
//! A flows-mode layer and a reassembling one differ in what ends a record
//! (flows keep a connection open past its FIN until it is idle, to count
//! its last ACK, and start a stream at any packet): so records equal to
//! `weir flows`' and stream files equal to `weir streams`' need a layer of
//! each kind, and the sensor runs at most these two per queue, never one
//! per output.
//!
//! Signals, as Suricata takes them: SIGHUP reopens the events file (for
//! logrotate) and closes the open packet and IPFIX files, their next
//! starting at the next packet or message under the name a rotation would
//! give it (so a file is whole when taken away, and none is overwritten);
//! SIGUSR2 reads the config again and takes its filters (the
//! capture's and the outputs') and rules without stopping the capture (a
//! capture thread switches filters between two batches, each worker between
//! two runs of packets: no packet is lost or judged twice); SIGUSR1 writes the
//! counters to the log; SIGTERM and SIGINT flush every record and exit 0.
//! Readiness goes to systemd (`Type=notify`) once every output is open.

mod config;
mod metrics;
mod output;
mod plan;
mod run;

use crate::exit::bad_input;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(after_help = "A config (examples/sensor.toml has every key, its default and its meaning):\n\n  \
[capture]\n  source = \"afxdp:eth1@0-1\"\n  filter = \"not port 22\"\n\n  \
[record]\n  write = \"/var/lib/weir/pcap/%Y%m%d-%H%M%S.pcap\"\n  file-size = 100        # MB a file\n\n  \
[flows]\n  collector = [\"127.0.0.1:9995\"]\n\n  \
[streams]\n  cutoff = 65536\n\n  [inspect]\n  rules = \"/etc/weir/rules.txt\"\n\n  \
[events]\n  path = \"/var/log/weir/eve.json\"\n\n  [metrics]\n  listen = \"127.0.0.1:9101\"\n\n\
Every table but [capture] is optional; a table's keys are the long options of the command it stands for \
(weir record, flows, streams, inspect: see their --help), plus `filter`, the output's own libpcap filter on \
top of the capture's. Check a config with --check (exit 0, or 2 with each problem's file, line and key), \
then run it in the foreground (dist/weir-sensor.service runs it under systemd).\n\n\
Signals: HUP reopens the events file (logrotate) and closes the open packet and IPFIX files, the next packet or message starting the next file of their sequence; USR2 reloads the filters (the capture's and the outputs') and rules from the config without \
losing a packet, USR1 logs the counters, TERM and INT flush every record and exit 0.")]
pub struct SensorArgs {
    /// The config file (TOML).
    #[arg(value_name = "CONFIG", required_unless_present = "example")]
    pub config: Option<PathBuf>,

    /// Print an annotated config with every key, its default and its meaning (examples/sensor.toml), and exit.
    #[arg(long, conflicts_with = "check")]
    pub example: bool,

    /// Check the config and exit without capturing or writing anything: 0 if the sensor would start, 2 with every
    /// problem found (file, line and key) if not.
    #[arg(long)]
    pub check: bool,
}

pub fn run(args: SensorArgs) -> anyhow::Result<ExitCode> {
    let Some(file) = &args.config else {
        crate::exit::out!("{}", config::example().trim_end());
        return Ok(ExitCode::SUCCESS);
    };
    let cfg = config::load(file).map_err(|e| bad_input(anyhow::anyhow!(e)))?;
    let plan = plan::Plan::check(&cfg).map_err(|e| bad_input(anyhow::anyhow!(e)))?;
    if args.check {
        eprintln!("weir sensor: {}: the config is good: {}", file.display(), plan.describe(&cfg));
        return Ok(ExitCode::SUCCESS);
    }
    run::run(cfg, plan)
}
