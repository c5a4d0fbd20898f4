//! `weir inspect`: a signature-matching IDS workload, the cache-hungry
//! application locality buffering is measured with.
//!
//! Contract: every packet the source delivers reaches a worker, which
//! - finds its flow (the canonical 5-tuple, both directions alike) in the
//!   worker's flow table and counts packets, bytes, first and last timestamp;
//! - with rules on, matches its TCP or UDP payload against the rules of every
//!   port group its service port (min(src port, dst port)) belongs to and of the
//!   `any` groups, and records one alert per rule that matched the packet. By
//!   default the ports that share groups share one Aho-Corasick DFA holding all
//!   of those rules, so a packet is scanned once (see [`Matcher::new`]).
//!
//! At the end, alerts and then per-flow counters are written as JSON lines to
//! `-o` (standard output by default), sorted (alerts by time, flow and rule;
//! flows by key) so that runs in any delivery order write the same bytes: with
//! the locality buffer on and off the output must be identical. A summary goes
//! to standard error.
//!
//! `--work flows` runs the flow table alone, the second workload.

mod rules;

use crate::exit::out;
use crate::count::finish;
use crate::run::{human_rate, run_to_end, SourceArgs};
use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use anyhow::Context;
use clap::{Args, ValueEnum};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;
use weir::wire::{ip_proto, FlowTuple};
use weir::{Handler, LinkType, Packet};

#[derive(Args, Debug)]
#[command(
    // --print-rules needs no source.
    mut_arg("source", |a| a.required(false).required_unless_present("print_rules").default_value_if("print_rules", "true", "-")),
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
    /// cache-hungry case), or `nfa`, aho-corasick's compact contiguous NFA.
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

    /// No status lines while running.
    #[arg(short, long)]
    pub quiet: bool,

    #[command(flatten)]
    pub src: SourceArgs,
}

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
struct Matcher {
    groups: Vec<Group>,
    /// Per port, an index into `lists`.
    by_port: Box<[u32]>,
    /// The automata of the ports that share them, as indices into `groups`.
    lists: Vec<Vec<u16>>,
}

impl Matcher {
    /// Ports whose rule groups are the same share their automata. Merged (the
    /// default), a set of ports gets one automaton holding its groups' rules and
    /// the `any` rules, so a packet is scanned once, at the cost of a copy of the
    /// `any` rules in every automaton: what Snort does unless told to
    /// split-any-any. Split, every group has its own automaton and a packet is
    /// scanned with its port's groups and then the `any` group.
    fn new(rules: &[rules::Rule], kind: Automaton, split_any: bool) -> anyhow::Result<Matcher> {
        let mut order: Vec<&str> = Vec::new();
        let mut members: HashMap<&str, Vec<&rules::Rule>> = HashMap::new();
        for r in rules {
            if !members.contains_key(r.ports_text.as_str()) {
                order.push(&r.ports_text);
            }
            members.entry(&r.ports_text).or_default().push(r);
        }
        let mut any = Vec::new();
        let mut per_port: Vec<Vec<u16>> = vec![Vec::new(); 1 << 16];
        for (g, text) in order.iter().enumerate() {
            let g = u16::try_from(g).context("more than 65,535 port groups")?;
            let first = members[text][0];
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
        let build = |texts: &[&str]| -> anyhow::Result<Option<Group>> {
            let rs: Vec<&rules::Rule> = texts.iter().flat_map(|t| members[t].iter().copied()).collect();
            if rs.is_empty() {
                return Ok(None);
            }
            let automaton = AhoCorasick::builder()
                .match_kind(MatchKind::Standard)
                .kind(Some(kind.into()))
                .build(rs.iter().map(|r| &r.content))
                .with_context(|| format!("building the {kind:?} automaton of port group {}", texts.join(" + ")))?;
            Ok(Some(Group { automaton, ids: rs.iter().map(|r| r.id).collect() }))
        };
        let mut groups = Vec::new();
        let mut push = |g: Group| -> anyhow::Result<u16> {
            groups.push(g);
            u16::try_from(groups.len() - 1).context("more than 65,535 automata")
        };
        let any_texts: Vec<&str> = any.iter().map(|&g| order[usize::from(g)]).collect();
        let lists = if split_any {
            for text in &order {
                push(build(&[text])?.expect("a group has rules"))?;
            }
            sets.iter().map(|l| l.iter().chain(&any).copied().collect()).collect()
        } else {
            let mut lists = Vec::with_capacity(sets.len());
            for l in &sets {
                let mut texts: Vec<&str> = l.iter().map(|&g| order[usize::from(g)]).collect();
                texts.extend(&any_texts);
                lists.push(match build(&texts)? {
                    Some(g) => vec![push(g)?],
                    None => Vec::new(),
                });
            }
            lists
        };
        Ok(Matcher { groups, by_port, lists })
    }

    /// Heap bytes of the automata.
    fn memory(&self) -> usize {
        self.groups.iter().map(|g| g.automaton.memory_usage()).sum()
    }

    /// Call `alert` once per rule whose content is in `payload`.
    fn scan(&self, port: u16, payload: &[u8], seen: &mut Vec<u32>, mut alert: impl FnMut(u32)) {
        seen.clear();
        for &g in &self.lists[self.by_port[usize::from(port)] as usize] {
            let group = &self.groups[usize::from(g)];
            for m in group.automaton.find_overlapping_iter(payload) {
                let id = group.ids[m.pattern().as_usize()];
                if !seen.contains(&id) {
                    seen.push(id);
                    alert(id);
                }
            }
        }
    }
}

#[derive(Copy, Clone, Debug, Default)]
struct FlowCounters {
    packets: u64,
    bytes: u64,
    first_ns: u64,
    last_ns: u64,
    alerts: u64,
}

impl FlowCounters {
    fn merge(&mut self, o: &FlowCounters) {
        if self.packets == 0 {
            *self = *o;
            return;
        }
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.first_ns = self.first_ns.min(o.first_ns);
        self.last_ns = self.last_ns.max(o.last_ns);
        self.alerts += o.alerts;
    }
}

/// One worker's state.
struct Inspector {
    matcher: Option<Arc<Matcher>>,
    link: LinkType,
    flows: HashMap<FlowTuple, FlowCounters>,
    /// (timestamp, flow, rule).
    alerts: Vec<(u64, FlowTuple, u32)>,
    /// Packets that are not IP, by count: they have no flow.
    other: u64,
    seen: Vec<u32>,
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
        let f = self.flows.entry(key).or_insert(FlowCounters { first_ns: ts, last_ns: ts, ..FlowCounters::default() });
        f.packets += 1;
        f.bytes += u64::from(p.wire_len());
        f.first_ns = f.first_ns.min(ts);
        f.last_ns = f.last_ns.max(ts);
        let Some(m) = &self.matcher else { return };
        let (Some(ports), ip_proto::TCP | ip_proto::UDP) = (tuple.ports(), tuple.protocol()) else { return };
        let Some(payload) = payload(self.link, data) else { return };
        if payload.is_empty() {
            return;
        }
        let alerts = &mut self.alerts;
        let mut n = 0;
        m.scan(ports.min_port(), payload, &mut self.seen, |id| {
            alerts.push((ts, key, id));
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

pub fn run(args: InspectArgs) -> anyhow::Result<ExitCode> {
    if args.print_rules {
        out!("{}", rules::builtin(args.group_rules as usize).trim_end_matches('\n'));
        return Ok(ExitCode::SUCCESS);
    }
    let matcher = match args.work {
        Work::Flows => None,
        Work::Rules => {
            let (text, origin) = match &args.rules {
                Some(p) => (std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?, p.display().to_string()),
                None => (rules::builtin(args.group_rules as usize), "the built-in rule set".to_string()),
            };
            let rules = rules::parse(&text, &origin).map_err(crate::exit::bad_input)?;
            let m = Matcher::new(&rules, args.automaton, args.split_any)?;
            if !args.quiet {
                eprintln!(
                    "weir inspect: {} rules in {} {:?} automata (any-port rules {}), {:.1} MiB",
                    rules.len(),
                    m.groups.len(),
                    args.automaton,
                    if args.split_any { "in their own" } else { "in each" },
                    m.memory() as f64 / (1 << 20) as f64
                );
            }
            Some(Arc::new(m))
        }
    };
    let mut out: Box<dyn Write> = match args.output.as_str() {
        "-" => Box::new(std::io::stdout().lock()),
        path => Box::new(std::fs::File::create(path).with_context(|| format!("creating {path}"))?),
    };
    let engine = args.src.engine()?;
    let link = engine.info().link_type;
    let started = Instant::now();
    let report = run_to_end(engine, "inspect", &args.src.live, args.quiet, |_| Inspector {
        matcher: matcher.clone(),
        link,
        flows: HashMap::new(),
        alerts: Vec::new(),
        other: 0,
        seen: Vec::new(),
    })?;
    let secs = started.elapsed().as_secs_f64();
    let mut flows: HashMap<FlowTuple, FlowCounters> = HashMap::new();
    let mut alerts = Vec::new();
    let mut other = 0;
    for (_, w) in &report.handlers {
        for (k, c) in &w.flows {
            flows.entry(*k).or_default().merge(c);
        }
        alerts.extend_from_slice(&w.alerts);
        other += w.other;
    }
    alerts.sort_unstable();
    let mut flows: Vec<_> = flows.into_iter().collect();
    flows.sort_unstable_by_key(|f| f.0);
    let mut w = std::io::BufWriter::new(&mut out);
    for (ts, flow, id) in &alerts {
        writeln!(w, "{}", serde_json::json!({"alert": id, "ts_ns": ts, "flow": flow_text(flow)}))?;
    }
    for (k, c) in &flows {
        writeln!(
            w,
            "{}",
            serde_json::json!({"flow": flow_text(k), "packets": c.packets, "bytes": c.bytes,
                "first_ns": c.first_ns, "last_ns": c.last_ns, "alerts": c.alerts})
        )?;
    }
    w.flush()?;
    let total = report.stats.total();
    eprintln!(
        "weir inspect: {} packets in {secs:.2} s ({}pps), {} flows, {} alerts, {} packets without a flow; drops {}+{}",
        total.delivered,
        human_rate(total.delivered as f64 / secs.max(1e-9)),
        flows.len(),
        alerts.len(),
        other,
        total.capture_drops,
        total.delivery_drops
    );
    finish(&report)
}
