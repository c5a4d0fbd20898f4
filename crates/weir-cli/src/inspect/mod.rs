//! `weir inspect`: a signature-matching IDS workload, the cache-hungry
//! application locality buffering is measured with.
//!
//! Contract: every packet the source delivers reaches a worker, which
//! - finds its flow (the canonical 5-tuple, both directions alike) in the
//!   worker's flow table and counts packets and bytes (the table keeps the first
//!   and last timestamp);
//! - with rules on, matches its TCP or UDP payload against the rules of every
//!   port group its service port (min(src port, dst port)) belongs to and of the
//!   `any` groups, and records one alert per rule that matched the packet. By
//!   default the ports that share groups share one Aho-Corasick DFA holding all
//!   of those rules, so a packet is scanned once (see [`Matcher::new`]).
//!
//! Memory is bounded. Each worker's flow table ([`weir::flowtable`]) holds at
//! most `--max-flows` / queues flows, allocated at the start and reported then;
//! a flow idle for `--idle-timeout` of packet time ends, and when the table is
//! full the flow seen least recently is evicted. Both are counted. A flow that
//! leaves the table is not lost: its record, like every alert, goes to a
//! bounded buffer that is written to a temporary file as a sorted run when full
//! ([`spill`]), and everything is merged at the end.
//!
//! At the end, alerts and then flow records are written as JSON lines to `-o`
//! (standard output by default), sorted (alerts by time, flow and rule; flows by
//! key, then time) so that runs in any delivery order write the same bytes: with
//! the locality buffer on and off, on one queue or several, and whatever the
//! table's size, the output must be identical ([`records`] says how records of
//! one flow that left the table early are joined). A summary goes to standard
//! error, or as JSON to standard output with `--json`.
//!
//! `--work flows` runs the flow table alone, the second workload.
//!
//! `--streams` matches the rules on the stream layer's data instead of on
//! packets, with one alert per match at its stream offset ([`stream_mode`]).

mod records;
mod rules;
mod spill;
mod stream_mode;

use crate::count::finish;
use crate::exit::bad_input;
use crate::exit::out;
use crate::run::{human_rate, run_to_end, SourceArgs};
use crate::streams::StreamOptions;
use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use anyhow::{anyhow, Context};
use clap::{Args, ValueEnum};
use records::{AlertRecord, FlowRecord};
use spill::Spill;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;
use weir::flowtable::{FlowTable, TableLimits, TableStats};
use weir::memory::Plan;
use weir::stream::StreamConfig;
use weir::wire::{ip_proto, FlowTuple};
use weir::{Handler, LinkType, Packet};

#[derive(Args, Debug)]
#[command(
    // --print-rules needs no source.
    mut_arg("source", |a| a.required(false).required_unless_present("print_rules").default_value_if("print_rules", "true", "-")),
    // The stream layer's options mean nothing to packet matching.
    mut_arg("mode", |a| a.requires("streams")),
    mut_arg("midstream", |a| a.requires("streams")),
    mut_arg("ignore_window", |a| a.requires("streams")),
    mut_arg("cutoff", |a| a.requires("streams")),
    mut_arg("classes", |a| a.requires("streams")),
    mut_arg("hold_limit", |a| a.requires("streams")),
    mut_arg("piece", |a| a.requires("streams")),
    mut_arg("flush_timeout", |a| a.requires("streams")),
    mut_arg("max_streams", |a| a.requires("streams")),
    mut_arg("memory", |a| a.requires("streams")),
    after_help = "The rule file format (one rule per line, `#` comments):\n\n  \
# id   ports        content\n  1001   80,8080      \"GET /admin\"\n  1002   6000-6010    \"|90 90 90|login\"\n  \
1003   any          \"|de ad be ef|\"\n\n\
A rule applies to TCP and UDP packets whose service port, the smaller of the two ports, is in its list \
(`any`: every packet with a payload); its content is searched anywhere in the payload, exactly. Rules \
with the same ports text form a port group; the ports that share groups share one Aho-Corasick automaton \
holding their groups' rules and the `any` rules (--split-any: the `any` rules in one automaton of their own, \
scanned after the port's). Without --rules the built-in set is used: 4,080 strings in 50 port groups by \
default, generated deterministically (print it with --print-rules; scale it with --group-rules: at 500, \
25,500 strings in 516 MiB of DFAs).\n\n\
Example, the same work with and without locality buffering:\n  \
weir synth -o /tmp/t.pcap -n 2000000 -c 100000\n  weir inspect /tmp/t.pcap -o /tmp/off.jsonl\n  \
weir inspect /tmp/t.pcap --locality 8000 -o /tmp/on.jsonl   # same bytes, fewer cache misses"
)]
pub struct InspectArgs {
    /// Rule file (see below); the built-in set when not given.
    #[arg(long, value_name = "FILE")]
    pub rules: Option<PathBuf>,

    /// Strings in each port group of the built-in set (twice as many in its `any`
    /// group): the size of the automata, and so of the application's working set.
    #[arg(long, value_name = "N", default_value_t = rules::PER_GROUP as u32, conflicts_with = "rules",
          value_parser = clap::value_parser!(u32).range(1..=MAX_GROUP_RULES))]
    pub group_rules: u32,

    /// Print the built-in rule set and exit.
    #[arg(long)]
    pub print_rules: bool,

    /// The automata: `dfa`, a full transition table per automaton (one lookup per
    /// payload byte, and much memory: what an IDS tuned for speed runs, and the
    /// cache-hungry case), or `nfa`, aho-corasick's compact contiguous NFA. An automaton whose DFA would take
    /// minutes to build (contents tens of kilobytes long) is built as an NFA, with a warning.
    #[arg(long, value_enum, default_value_t = Automaton::Dfa)]
    pub automaton: Automaton,

    /// Keep the `any` rules in an automaton of their own, scanned after the port's,
    /// instead of in every port group's automaton (Snort's split-any-any).
    #[arg(long)]
    pub split_any: bool,

    /// What each worker does: `rules` (signatures and the flow table) or `flows` (the flow table alone).
    #[arg(long, value_enum, default_value_t = Work::Rules)]
    pub work: Work,

    /// Write alerts and per-flow counters as JSON lines here (`-`: standard output).
    #[arg(short, long, value_name = "FILE", default_value = "-")]
    pub output: String,

    /// Most flows the flow tables hold, all queues together (each queue's table
    /// holds its share, N / queues). About 100 bytes per flow, allocated at the
    /// start. When a table is full, the flow seen least recently is evicted: its
    /// record is kept for the output, not lost, and the eviction is counted.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_FLOWS, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_flows: u32,

    /// A flow with no packet for this long ends (a timeout, counted): it leaves the
    /// table, its record is kept for the output, and a later packet of its 5-tuple
    /// starts a new record. In packet time (the trace's timestamps), so runs over a
    /// trace are reproducible.
    /// The default, five minutes, is Zeek's TCP inactivity timeout, and Suricata's for
    /// established flows.
    #[arg(long, value_name = "SECS", default_value = "300", value_parser = crate::args::seconds(0.000_001))]
    pub idle_timeout: std::time::Duration,

    /// Print the summary as one JSON object on standard output (then -o must name a file).
    #[arg(long)]
    pub json: bool,

    /// No status lines while running.
    #[arg(short, long)]
    pub quiet: bool,

    /// Match the rules on the stream layer's data instead of on packets: each
    /// direction of a TCP connection reassembled in order (a content split
    /// across segments is found), the datagrams of a UDP stream one after the
    /// other. One alert per match, with its stream offset; --cutoff BYTES
    /// leaves the rest of each direction unscanned (its bytes counted as
    /// discarded). The stream options below apply; --idle-timeout closes streams.
    #[arg(long, conflicts_with = "max_flows")]
    pub streams: bool,

    #[command(flatten)]
    pub src: SourceArgs,

    #[command(flatten, next_help_heading = "Kernel cutoff (with --streams)")]
    pub kernel: crate::run::KernelCutoffArgs,

    #[command(flatten, next_help_heading = "Stream options (with --streams)")]
    pub stream: StreamOptions,
    #[command(flatten)]
    pub metrics: crate::metrics::MetricsArgs,
    /// `--kafka` (with --streams): every match as an `alert` record, as it is found.
    #[command(flatten)]
    pub kafka: crate::kafka::KafkaArgs,
}

/// 1,000,000 flows: about 100 MiB of flow tables.
const DEFAULT_MAX_FLOWS: u32 = 1_000_000;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Automaton {
    Dfa,
    Nfa,
}

impl From<Automaton> for AhoCorasickKind {
    fn from(a: Automaton) -> AhoCorasickKind {
        match a {
            Automaton::Dfa => AhoCorasickKind::DFA,
            Automaton::Nfa => AhoCorasickKind::ContiguousNFA,
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Work {
    Rules,
    Flows,
}

/// Most strings per group of the built-in set: 2,000 build about 2 GiB of
/// DFAs (bench/locality_rules.py), the largest set measured.
const MAX_GROUP_RULES: i64 = 2_000;

/// One automaton and the rule of each of its patterns.
struct Group {
    automaton: AhoCorasick,
    ids: Vec<u32>,
}

/// The automata, and which of them a packet of each service port is scanned with.
pub(crate) struct Matcher {
    groups: Vec<Group>,
    /// Per port, an index into `lists`.
    by_port: Box<[u32]>,
    /// The automata of the ports that share them, as indices into `groups`.
    lists: Vec<Vec<u16>>,
}

/// Which rules each automaton holds and which automata each port is scanned
/// with, before any automaton is built: what the memory check estimates from.
/// An automaton is a list of port groups, never a copy of their rules, so the
/// layout of 50,000 port groups each merged with 50,000 `any` rules is small,
/// and the estimate refuses it before anything large is allocated.
struct Layout<'r> {
    /// Each port group's rules, in file order.
    groups: Vec<Vec<&'r rules::Rule>>,
    /// Each port group's content bytes and longest content.
    sizes: Vec<(u64, u64)>,
    /// Each automaton's port groups, in build order; none is empty.
    automata: Vec<Vec<u16>>,
    by_port: Box<[u32]>,
    lists: Vec<Vec<u16>>,
}

/// Past this many steps (states times the longest content) a DFA's build
/// could take minutes: it fills each state's missing transitions by walking
/// failure links, as deep as the longest content at worst (one rule of
/// 100,000 bytes of `A` took 29 s). Such an automaton is built as an NFA,
/// whose build is linear, with a warning. The built-in sets stay far below
/// (2,000 strings a group: about 90,000 states of at most 24 bytes).
const DFA_BUILD_STEPS: u64 = 1 << 30;

impl<'r> Layout<'r> {
    /// Ports whose rule groups are the same share their automata. Merged (the
    /// default), a set of ports gets one automaton holding its groups' rules and
    /// the `any` rules, so a packet is scanned once, at the cost of a copy of the
    /// `any` rules in every automaton: what Snort does unless told to
    /// split-any-any. Split, every group has its own automaton and a packet is
    /// scanned with its port's groups and then the `any` group.
    fn new(rules: &'r [rules::Rule], split_any: bool) -> anyhow::Result<Layout<'r>> {
        let mut index_of: HashMap<&str, u16> = HashMap::new();
        let mut groups: Vec<Vec<&rules::Rule>> = Vec::new();
        for r in rules {
            let g = match index_of.get(r.ports_text.as_str()) {
                Some(&g) => g,
                None => {
                    let g = u16::try_from(groups.len()).context("more than 65,535 port groups")?;
                    index_of.insert(&r.ports_text, g);
                    groups.push(Vec::new());
                    g
                }
            };
            groups[usize::from(g)].push(r);
        }
        let mut any = Vec::new();
        let mut per_port: Vec<Vec<u16>> = vec![Vec::new(); 1 << 16];
        for (g, members) in groups.iter().enumerate() {
            let g = g as u16; // fewer than 65,536, checked above
            let first = members[0];
            if first.any_port() {
                any.push(g);
            }
            for range in &first.ports {
                for p in range.clone() {
                    per_port[usize::from(p)].push(g);
                }
            }
        }
        let mut sets: Vec<Vec<u16>> = Vec::new();
        let mut index: HashMap<Vec<u16>, u32> = HashMap::new();
        let by_port = per_port
            .into_iter()
            .map(|l| {
                *index.entry(l.clone()).or_insert_with(|| {
                    sets.push(l);
                    (sets.len() - 1) as u32
                })
            })
            .collect();
        let mut automata: Vec<Vec<u16>> = Vec::new();
        let mut push = |gs: Vec<u16>| -> anyhow::Result<Option<u16>> {
            if gs.is_empty() {
                return Ok(None);
            }
            automata.push(gs);
            u16::try_from(automata.len() - 1).context("more than 65,535 automata").map(Some)
        };
        let lists = if split_any {
            for g in 0..groups.len() {
                push(vec![g as u16])?;
            }
            sets.iter().map(|l| l.iter().chain(&any).copied().collect()).collect()
        } else {
            let mut lists = Vec::with_capacity(sets.len());
            for l in &sets {
                lists.push(push(l.iter().chain(&any).copied().collect())?.into_iter().collect());
            }
            lists
        };
        let sizes = groups
            .iter()
            .map(|rs| rs.iter().fold((0u64, 0u64), |(sum, longest), r| (sum + r.content.len() as u64, longest.max(r.content.len() as u64))))
            .collect();
        Ok(Layout { groups, sizes, automata, by_port, lists })
    }

    /// The rules of automaton `a`, in build order.
    fn rules(&self, a: usize) -> impl Iterator<Item = &'r rules::Rule> + '_ {
        self.automata[a].iter().flat_map(|&g| self.groups[usize::from(g)].iter().copied())
    }

    /// At most the states of automaton `a` (a state per content byte, before
    /// any sharing of prefixes, and the start), and its longest content.
    fn shape(&self, a: usize) -> (u64, u64) {
        self.automata[a].iter().fold((1, 0), |(states, longest), &g| {
            let (bytes, most) = self.sizes[usize::from(g)];
            (states.saturating_add(bytes), longest.max(most))
        })
    }

    /// The automaton `a` is built as: the kind asked for, but an NFA where a
    /// DFA's build would take too long ([`DFA_BUILD_STEPS`]).
    fn kind(&self, a: usize, asked: Automaton) -> Automaton {
        let (states, longest) = self.shape(a);
        if asked == Automaton::Dfa && states.saturating_mul(longest) > DFA_BUILD_STEPS {
            Automaton::Nfa
        } else {
            asked
        }
    }

    /// At most what the automata will take: a row of 256 four-byte transitions
    /// per state in a DFA (fewer with byte classes), a few words in an NFA.
    fn memory_bound(&self, asked: Automaton) -> u64 {
        (0..self.automata.len()).fold(0u64, |total, a| {
            let per_state: u64 = match self.kind(a, asked) {
                Automaton::Dfa => 256 * 4,
                Automaton::Nfa => 64,
            };
            total.saturating_add(self.shape(a).0.saturating_mul(per_state))
        })
    }
}

impl Matcher {
    fn new(layout: Layout<'_>, asked: Automaton) -> anyhow::Result<Matcher> {
        let mut groups = Vec::with_capacity(layout.automata.len());
        for a in 0..layout.automata.len() {
            let kind = layout.kind(a, asked);
            let ids: Vec<u32> = layout.rules(a).map(|r| r.id).collect();
            let automaton = AhoCorasick::builder()
                .match_kind(MatchKind::Standard)
                .kind(Some(kind.into()))
                .build(layout.rules(a).map(|r| &r.content))
                .with_context(|| format!("building {kind:?} automaton {a} of {} rules", ids.len()))?;
            groups.push(Group { automaton, ids });
        }
        Ok(Matcher { groups, by_port: layout.by_port, lists: layout.lists })
    }

    /// Heap bytes of the automata.
    fn memory(&self) -> usize {
        self.groups.iter().map(|g| g.automaton.memory_usage()).sum()
    }

    /// Call `found` with the rule and the place of every match in `data` of
    /// the rules of service port `port`, overlapping matches included.
    pub(crate) fn each_match(&self, port: u16, data: &[u8], mut found: impl FnMut(u32, aho_corasick::Match)) {
        for &g in &self.lists[self.by_port[usize::from(port)] as usize] {
            let group = &self.groups[usize::from(g)];
            for m in group.automaton.find_overlapping_iter(data) {
                found(group.ids[m.pattern().as_usize()], m);
            }
        }
    }

    /// Call `alert` once per rule whose content is in `payload`.
    fn scan(&self, port: u16, payload: &[u8], seen: &mut Vec<u32>, mut alert: impl FnMut(u32)) {
        seen.clear();
        self.each_match(port, payload, |id, _| {
            if !seen.contains(&id) {
                seen.push(id);
                alert(id);
            }
        });
    }
}

/// A flow's counters while it is in the table (its times are the table's).
#[derive(Copy, Clone, Debug, Default)]
struct Counters {
    packets: u64,
    bytes: u64,
    alerts: u64,
}

/// One worker's state.
struct Inspector {
    matcher: Option<Arc<Matcher>>,
    link: LinkType,
    flows: FlowTable<FlowTuple, Counters>,
    /// Flows that left the table, waiting for the sorted output.
    ended: Spill<FlowRecord>,
    alerts: Spill<AlertRecord>,
    /// Packets that are not IP, by count: they have no flow.
    other: u64,
    seen: Vec<u32>,
    /// The first failure to write a spill file: reported at the end, and the run fails.
    error: Option<std::io::Error>,
}

impl Handler for Inspector {
    fn packet(&mut self, p: &Packet<'_>) {
        let data = p.data();
        let Some(tuple) = FlowTuple::parse(self.link, data) else {
            self.other += 1;
            return;
        };
        let key = tuple.canonical();
        let ts = p.ts_ns();
        let (ended, error) = (&mut self.ended, &mut self.error);
        let f = self.flows.entry(key, ts, Counters::default, |flow, _| {
            if let Err(e) = ended.push(FlowRecord::of(flow)) {
                error.get_or_insert(e);
            }
        });
        f.packets += 1;
        f.bytes += u64::from(p.wire_len());
        let Some(m) = &self.matcher else { return };
        let (Some(ports), ip_proto::TCP | ip_proto::UDP) = (tuple.ports(), tuple.protocol()) else { return };
        let Some(payload) = payload(self.link, data) else { return };
        if payload.is_empty() {
            return;
        }
        let (alerts, error) = (&mut self.alerts, &mut self.error);
        let mut n = 0;
        m.scan(ports.min_port(), payload, &mut self.seen, |rule| {
            if let Err(e) = alerts.push(AlertRecord { ts_ns: ts, flow: key, rule }) {
                error.get_or_insert(e);
            }
            n += 1;
        });
        f.alerts += n;
    }
}

/// The TCP or UDP payload of a frame, as far as it was captured.
fn payload(link: LinkType, data: &[u8]) -> Option<&[u8]> {
    let sliced = match link {
        LinkType::ETHERNET => etherparse::SlicedPacket::from_ethernet(data).ok()?,
        LinkType::RAW | LinkType::IPV4 | LinkType::IPV6 => etherparse::SlicedPacket::from_ip(data).ok()?,
        _ => return None,
    };
    match sliced.transport? {
        etherparse::TransportSlice::Tcp(t) => Some(t.payload()),
        etherparse::TransportSlice::Udp(u) => Some(u.payload()),
        _ => None,
    }
}

/// A flow's Community ID v1 (seed 0) for the JSON records: null where the
/// tuple lacks what the hash needs (a fragment's ports, ICMP's type).
fn community_id(t: &FlowTuple) -> Option<String> {
    weir::stream::community_id::CommunityId::default().of_tuple(t)
}

fn flow_text(t: &FlowTuple) -> String {
    let ports = t.ports();
    let (sp, dp) = ports.map_or((0, 0), |p| (p.src, p.dst));
    match t {
        FlowTuple::V4 { src, dst, proto, .. } => {
            format!("{}:{sp} {}:{dp} {proto}", std::net::Ipv4Addr::from(*src), std::net::Ipv4Addr::from(*dst))
        }
        FlowTuple::V6 { src, dst, proto, .. } => {
            format!("[{}]:{sp} [{}]:{dp} {proto}", std::net::Ipv6Addr::from(*src), std::net::Ipv6Addr::from(*dst))
        }
    }
}

/// Records held in memory per worker and kind before a sorted run goes to disk.
const SPILL_RECORDS: usize = 1 << 16;

/// For the sensor's `[inspect]`: the rules of `args` (read again at each
/// reload) built into a matcher of stream data, the stream layer's
/// settings they need, and what the automata take at most.
pub(crate) fn stream_matcher(args: &InspectArgs) -> anyhow::Result<(Arc<Matcher>, StreamConfig, u64)> {
    let (text, origin) = match &args.rules {
        Some(p) => (rules::read(p).map_err(bad_input)?, p.display().to_string()),
        None => (rules::builtin(args.group_rules as usize), "the built-in rule set".to_string()),
    };
    let rules = rules::parse(&text, &origin).map_err(bad_input)?;
    let cfg = stream_mode::config(args, &rules)?;
    let layout = Layout::new(&rules, args.split_any)?;
    let bound = layout.memory_bound(args.automaton);
    Ok((Arc::new(Matcher::new(layout, args.automaton)?), cfg, bound))
}

pub fn run(args: InspectArgs) -> anyhow::Result<ExitCode> {
    if args.print_rules {
        out!("{}", rules::builtin(args.group_rules as usize).trim_end_matches('\n'));
        return Ok(ExitCode::SUCCESS);
    }
    if args.json && args.output == "-" {
        return Err(bad_input(anyhow!("--json writes the summary to standard output: give the records a file with -o FILE")));
    }
    let idle_timeout_ns = u64::try_from(args.idle_timeout.as_nanos()).unwrap_or(u64::MAX);
    let rules = match args.work {
        Work::Flows => None,
        Work::Rules => {
            let (text, origin) = match &args.rules {
                Some(p) => (rules::read(p).map_err(bad_input)?, p.display().to_string()),
                None => (rules::builtin(args.group_rules as usize), "the built-in rule set".to_string()),
            };
            Some(rules::parse(&text, &origin).map_err(bad_input)?)
        }
    };
    if args.kafka.brokers.is_some() && !args.streams {
        return Err(bad_input(anyhow!("--kafka publishes the alerts of --streams (each with its stream, as the sensor's): add --streams")));
    }
    let stream_cfg = match (&rules, args.streams) {
        (Some(r), true) => Some(stream_mode::config(&args, r)?),
        (None, true) => return Err(bad_input(anyhow!("--streams matches the rules on stream data: --work flows has no rules"))),
        (_, false) => None,
    };
    let layout = rules.as_deref().map(|r| Layout::new(r, args.split_any)).transpose()?;
    // What this application allocates beside the engine, checked with it before
    // either is allocated: the automata (bounded from the rules), and the flow
    // tables or the stream layer's tables and arenas.
    let mut app = stream_cfg.as_ref().map_or_else(Plan::new, |c| c.memory_plan(1));
    if let (Some(l), Some(r)) = (&layout, &rules) {
        let source = if args.rules.is_some() { "--rules" } else { "--group-rules" };
        let bound = l.memory_bound(args.automaton);
        // Merged, the `any` rules are in every automaton: say what split costs.
        let split = Some(Layout::new(r, true)?.memory_bound(args.automaton)).filter(|&b| !args.split_any && b < bound);
        let hint = split.map_or(String::new(), |b| format!("; --split-any builds at most {:.1} MiB", b as f64 / (1 << 20) as f64));
        app.add(format!("{:?} automata of {} rules ({source}; at most{hint})", args.automaton, r.len()), bound);
        for a in (0..l.automata.len()).filter(|&a| l.kind(a, args.automaton) != args.automaton) {
            if let Some(longest) = l.rules(a).max_by_key(|r| r.content.len()) {
                eprintln!(
                    "weir inspect: warning: automaton {a} ({} rules; rule {}'s content of {} bytes) built as an NFA: as a DFA \
                     its build could take minutes (states times the longest content past 2^30)",
                    l.rules(a).count(),
                    longest.id,
                    longest.content.len()
                );
            }
        }
    }
    if stream_cfg.is_none() {
        app.add(
            format!("flow tables of {} flows (--max-flows)", args.max_flows),
            FlowTable::<FlowTuple, Counters>::memory_for(args.max_flows as usize),
        );
    }
    // The kernel cutoff needs the stream layer: without --streams, no map.
    let metrics = args.metrics.bind()?;
    let kafka = crate::kafka::start_for(&args.kafka, &["alert"])?;
    let engine = args.src.engine_with(app, if stream_cfg.is_some() { args.kernel.entries() } else { 0 })?;
    let matcher = match layout {
        None => None,
        Some(l) => {
            let m = Matcher::new(l, args.automaton)?;
            if !args.quiet {
                eprintln!(
                    "weir inspect: {} rules in {} {:?} automata (any-port rules {}), {:.1} MiB",
                    rules.as_ref().map_or(0, Vec::len),
                    m.groups.len(),
                    args.automaton,
                    if args.split_any { "in their own" } else { "in each" },
                    mib(m.memory())
                );
            }
            Some(Arc::new(m))
        }
    };
    let mut out: Box<dyn Write> = match args.output.as_str() {
        "-" => Box::new(Named { inner: std::io::stdout().lock(), name: "standard output".into() }),
        path => Box::new(Named { inner: std::fs::File::create(path).with_context(|| format!("creating {path}"))?, name: path.into() }),
    };
    if let Some(cfg) = stream_cfg {
        let matcher = matcher.expect("--streams has rules, so a matcher");
        return stream_mode::run(engine, &cfg, matcher, out, &args, metrics, kafka);
    }
    let link = engine.info().link_type;
    let queues = engine.info().queues.len().max(1);
    let per_queue = (args.max_flows as usize).div_ceil(queues);
    let limits = TableLimits::new(per_queue, idle_timeout_ns).map_err(|e| crate::exit::setting_error(&e))?;
    // Made before the run so the memory reported is what was allocated.
    let mut workers: Vec<Inspector> = (0..queues)
        .map(|_| Inspector {
            matcher: matcher.clone(),
            link,
            flows: FlowTable::new(limits),
            ended: Spill::new(SPILL_RECORDS),
            alerts: Spill::new(SPILL_RECORDS),
            other: 0,
            seen: Vec::new(),
            error: None,
        })
        .collect();
    // The index grows with the flows held: the bound is what the memory check approved.
    let table_bytes = FlowTable::<FlowTuple, Counters>::memory_for(per_queue) as usize * queues;
    let spill_bytes: usize = workers.iter().map(|w| w.ended.memory_bytes() + w.alerts.memory_bytes()).sum();
    if !args.quiet {
        eprintln!(
            "weir inspect: flow table of at most {} flows ({per_queue} per queue), idle timeout {} s of packet time: \
             {:.1} MiB at most, plus {:.1} MiB for records waiting to be written",
            per_queue * queues,
            args.idle_timeout.as_secs_f64(),
            mib(table_bytes),
            mib(spill_bytes)
        );
    }
    let started = Instant::now();
    let mut report = run_to_end(engine, "inspect", &args.src.live, args.quiet || args.json, metrics, |_| {
        workers.pop().expect("one inspector was made per queue")
    })?;
    let secs = started.elapsed().as_secs_f64();

    let mut table = TableStats::default();
    let mut flow_spills = Vec::new();
    let mut alert_spills = Vec::new();
    let mut other = 0;
    let mut held = 0;
    for (_, w) in std::mem::take(&mut report.handlers) {
        if let Some(e) = w.error {
            return Err(anyhow!(e).context("writing records to a temporary file"));
        }
        let s = w.flows.stats();
        table.created += s.created;
        table.timeouts += s.timeouts;
        table.evictions += s.evictions;
        table.peak = table.peak.max(s.peak);
        held += w.flows.len();
        let mut ended = w.ended;
        for flow in w.flows.into_flows() {
            ended.push(FlowRecord::of(flow)).context("writing records to a temporary file")?;
        }
        other += w.other;
        flow_spills.push(ended);
        alert_spills.push(w.alerts);
    }
    let spilled = flow_spills.iter().map(Spill::spilled).sum::<u64>() + alert_spills.iter().map(Spill::spilled).sum::<u64>();

    let mut w = std::io::BufWriter::new(&mut out);
    let mut alerts = 0u64;
    for a in spill::merge(alert_spills).context("reading back spilled alerts")? {
        let a = a.context("reading back spilled alerts")?;
        writeln!(
            w,
            "{}",
            serde_json::json!({"alert": a.rule, "ts_ns": a.ts_ns, "flow": flow_text(&a.flow), "community_id": community_id(&a.flow)})
        )?;
        alerts += 1;
    }
    let mut records = 0u64;
    let mut pending: Option<FlowRecord> = None;
    for r in spill::merge(flow_spills).context("reading back spilled flow records")? {
        let r = r.context("reading back spilled flow records")?;
        match &mut pending {
            Some(p) if p.continued_by(&r, idle_timeout_ns) => p.absorb(&r),
            _ => {
                if let Some(p) = pending.replace(r) {
                    p.write(&mut w)?;
                    records += 1;
                }
            }
        }
    }
    if let Some(p) = pending {
        p.write(&mut w)?;
        records += 1;
    }
    w.flush()?;
    drop(w);

    let total = report.stats.total();
    if args.json {
        let summary = serde_json::json!({
            "mode": "packets",
            "packets": total.delivered,
            "elapsed_s": secs,
            "flow_records": records,
            "alerts": alerts,
            "packets_without_flow": other,
            "flow_table": {
                "max_flows": per_queue * queues,
                "max_flows_per_queue": per_queue,
                "idle_timeout_s": args.idle_timeout.as_secs_f64(),
                "memory_bytes": table_bytes,
                "flows_created": table.created,
                "timeouts": table.timeouts,
                "evictions": table.evictions,
                "peak_flows_per_queue": table.peak,
                "flows_held_at_end": held,
            },
            "spill_buffer_bytes": spill_bytes,
            "records_spilled_to_disk": spilled,
            "capture_drops": total.capture_drops,
            "delivery_drops": total.delivery_drops,
        });
        out!("{summary}");
    } else {
        eprintln!(
            "weir inspect: {} packets in {secs:.2} s ({}pps), {records} flow records, {alerts} alerts, {other} packets without a flow; \
             flow table: {} flows, {} timed out, {} evicted (full), at most {} at once per queue{}; drops {}+{}",
            total.delivered,
            human_rate(total.delivered as f64 / secs.max(1e-9)),
            table.created,
            table.timeouts,
            table.evictions,
            table.peak,
            if spilled > 0 { format!(", {spilled} records spilled to disk") } else { String::new() },
            total.capture_drops,
            total.delivery_drops
        );
    }
    finish(&report)
}

/// The records' output, whose write errors name it (`writing to FILE: No space left
/// on device`); the error's kind is kept, so a reader that went away still
/// ends weir quietly (exit.rs).
struct Named<W> {
    inner: W,
    name: String,
}

impl<W: Write> Named<W> {
    fn named(&self, e: std::io::Error) -> std::io::Error {
        std::io::Error::new(e.kind(), format!("writing to {}: {e}", self.name))
    }
}

impl<W: Write> Write for Named<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf).map_err(|e| self.named(e))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush().map_err(|e| self.named(e))
    }
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1 << 20) as f64
}
