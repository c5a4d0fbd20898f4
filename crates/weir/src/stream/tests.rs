//! The reassembler against a table of cases, then against a byte-map model of
//! a first-copy-wins receiver on random segment streams.

use super::reassembly::{Config, Counters, Cutoff, EndReason, Flags, HoldLimit, Mode, Reassembler, Segment, Sink};
use proptest::prelude::*;

/// What a sink was told, owned, for comparing.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Event {
    Data(u64, Vec<u8>),
    Gap(u64, u64),
    End(EndReason),
}

/// Records events, joining data that follows data so that how the
/// reassembler happened to split a run does not matter to a comparison.
#[derive(Default)]
struct Recorder {
    events: Vec<Event>,
    /// The offset the next data or gap must start at.
    at: u64,
    ended: bool,
}

impl Sink for Recorder {
    fn data(&mut self, offset: u64, bytes: &[u8]) {
        assert!(!self.ended, "data after the end");
        assert_eq!(offset, self.at, "data out of order");
        assert!(!bytes.is_empty(), "empty data");
        self.at += bytes.len() as u64;
        if let Some(Event::Data(_, run)) = self.events.last_mut() {
            run.extend_from_slice(bytes);
        } else {
            self.events.push(Event::Data(offset, bytes.to_vec()));
        }
    }

    fn gap(&mut self, offset: u64, len: u64) {
        assert!(!self.ended, "gap after the end");
        assert_eq!(offset, self.at, "gap out of order");
        assert!(len > 0, "empty gap");
        self.at += len;
        self.events.push(Event::Gap(offset, len));
    }

    fn end(&mut self, reason: EndReason) {
        assert!(!self.ended, "two ends");
        self.ended = true;
        self.events.push(Event::End(reason));
    }
}

/// One step of a table case.
enum Step {
    Seg(u32, &'static [u8], Flags),
    Flush,
    Close(EndReason),
    SetCutoff(Cutoff),
    /// The receiver advertises a window: its ACK number and the window in bytes.
    Window(u32, u64),
}

use Step::{Close, Flush, Seg, SetCutoff, Window};

const ISN: u32 = 1000;
const D: Flags = Flags::NONE;
const SYN: Flags = Flags::SYN;
const FIN: Flags = Flags::FIN;
const RST: Flags = Flags::RST;

fn data(offset: u64, bytes: &[u8]) -> Event {
    Event::Data(offset, bytes.to_vec())
}

fn config(mode: Mode, hold: u64, cutoff: Cutoff, midstream: bool) -> Config {
    Config { mode, hold_limit: HoldLimit::new(hold).unwrap(), cutoff, midstream, ..Config::default() }
}

fn fast() -> Config {
    Config::default()
}

/// Strict mode with the receiver's window checked.
fn windowed(midstream: bool) -> Config {
    Config { receive_window: true, ..config(Mode::TcpStrict, HoldLimit::MAX, Cutoff::NONE, midstream) }
}

struct Case {
    name: &'static str,
    config: Config,
    steps: Vec<Step>,
    events: Vec<Event>,
    /// (delivered, gap, duplicate, discarded_cutoff, refused) at the end; held is always 0 after the steps here.
    counts: (u64, u64, u64, u64, u64),
}

fn run_case(case: &Case) {
    let mut r = Reassembler::new(case.config);
    let mut sink = Recorder::default();
    for step in &case.steps {
        match *step {
            Seg(seq, payload, flags) => r.segment(Segment { seq, payload, flags }, &mut sink),
            Flush => r.flush_gap(&mut sink),
            Close(reason) => r.close(reason, &mut sink),
            SetCutoff(cutoff) => r.set_cutoff(cutoff, &mut sink),
            Window(ack, window) => r.advertise(ack, window),
        }
    }
    assert_eq!(sink.events, case.events, "case {}: events", case.name);
    let c = r.counters();
    assert_eq!((c.delivered, c.gap, c.duplicate, c.discarded_cutoff, c.refused), case.counts, "case {}: counters {c:?}", case.name);
    assert_eq!(c.held, 0, "case {}: held", case.name);
    assert_identity(&c);
}

fn assert_identity(c: &Counters) {
    assert_eq!(c.received, c.delivered + c.duplicate + c.discarded_cutoff + c.refused + c.held, "{c:?}");
}

#[test]
fn table() {
    let s = ISN + 1; // the first payload byte, after the SYN
    let cases = vec![
        Case {
            name: "in order, then FIN",
            config: fast(),
            steps: vec![Seg(ISN, b"", SYN), Seg(s, b"hello", D), Seg(s + 5, b" world", FIN)],
            events: vec![data(0, b"hello world"), Event::End(EndReason::Fin)],
            counts: (11, 0, 0, 0, 0),
        },
        Case {
            name: "reordered segments are held, then delivered in order",
            config: fast(),
            steps: vec![Seg(ISN, b"", SYN), Seg(s + 6, b"world", D), Seg(s + 3, b"lo ", D), Seg(s, b"hel", D)],
            events: vec![data(0, b"hello world")],
            counts: (11, 0, 0, 0, 0),
        },
        Case {
            name: "a retransmission is delivered once",
            config: fast(),
            steps: vec![Seg(ISN, b"", SYN), Seg(s, b"abcd", D), Seg(s, b"abcd", D), Seg(s + 4, b"ef", D), Seg(s + 2, b"cdef", D)],
            events: vec![data(0, b"abcdef")],
            counts: (6, 0, 8, 0, 0),
        },
        Case {
            name: "overlap with different bytes: the held copy wins",
            config: fast(),
            steps: vec![Seg(ISN, b"", SYN), Seg(s + 4, b"BBBB", D), Seg(s, b"aaaaaaaaaa", D)],
            events: vec![data(0, b"aaaaBBBBaa")],
            counts: (10, 0, 4, 0, 0),
        },
        Case {
            name: "overlap with different bytes: the delivered copy wins",
            config: fast(),
            steps: vec![Seg(ISN, b"", SYN), Seg(s, b"abcd", D), Seg(s + 2, b"XXXXef", D)],
            events: vec![data(0, b"abcdXXef")],
            counts: (8, 0, 2, 0, 0),
        },
        Case {
            name: "overlaps between held segments: each byte's first copy wins",
            config: fast(),
            steps: vec![Seg(ISN, b"", SYN), Seg(s + 2, b"22", D), Seg(s + 6, b"66", D), Seg(s + 1, b"xxxxxxxxx", D), Seg(s, b"0", D)],
            events: vec![data(0, b"0x22xx66xx")],
            counts: (10, 0, 4, 0, 0),
        },
        Case {
            name: "sequence numbers wrap around 2^32",
            config: fast(),
            steps: vec![Seg(u32::MAX - 2, b"", SYN), Seg(2, b"efgh", FIN), Seg(u32::MAX - 1, b"abcd", D)],
            events: vec![data(0, b"abcdefgh"), Event::End(EndReason::Fin)],
            counts: (8, 0, 0, 0, 0),
        },
        Case {
            name: "a hole becomes a gap when the held bytes pass the limit",
            config: config(Mode::TcpFast, 4, Cutoff::NONE, false),
            steps: vec![Seg(ISN, b"", SYN), Seg(s, b"ab", D), Seg(s + 4, b"ef", D), Seg(s + 7, b"hij", D), Seg(s + 2, b"cd", D), Flush],
            events: vec![data(0, b"ab"), Event::Gap(2, 2), data(4, b"ef"), Event::Gap(6, 1), data(7, b"hij")],
            counts: (7, 3, 2, 0, 0),
        },
        Case {
            name: "a hole becomes a gap on flush, and the FIN ends the stream",
            config: fast(),
            steps: vec![Seg(ISN, b"", SYN), Seg(s, b"ab", D), Seg(s + 5, b"fg", D), Flush, Seg(s + 9, b"", FIN), Flush],
            events: vec![data(0, b"ab"), Event::Gap(2, 3), data(5, b"fg"), Event::Gap(7, 2), Event::End(EndReason::Fin)],
            counts: (4, 5, 0, 0, 0),
        },
        Case {
            name: "the cutoff falls in a segment",
            config: config(Mode::TcpFast, 1024, Cutoff::after(5), false),
            steps: vec![Seg(ISN, b"", SYN), Seg(s, b"abcdefgh", D), Seg(s + 3, b"defgh", D), Seg(s + 8, b"ij", FIN)],
            events: vec![data(0, b"abcde"), Event::End(EndReason::Fin)],
            counts: (5, 0, 2, 8, 0),
        },
        Case {
            name: "data past the cutoff is never held",
            config: config(Mode::TcpFast, 1024, Cutoff::after(4), false),
            steps: vec![Seg(ISN, b"", SYN), Seg(s + 2, b"cdef", D), Seg(s, b"ab", D)],
            events: vec![data(0, b"abcd")],
            counts: (4, 0, 0, 2, 0),
        },
        Case {
            name: "data with and after a RST is refused; held data is flushed first",
            config: fast(),
            steps: vec![Seg(ISN, b"", SYN), Seg(s, b"ab", D), Seg(s + 3, b"d", D), Seg(s + 4, b"rst", RST), Seg(s + 2, b"c", D)],
            events: vec![data(0, b"ab"), Event::Gap(2, 1), data(3, b"d"), Event::End(EndReason::Rst)],
            counts: (3, 1, 0, 0, 4),
        },
        Case {
            name: "strict mode refuses data before the SYN",
            config: config(Mode::TcpStrict, 1024, Cutoff::NONE, false),
            steps: vec![Seg(s, b"early", D), Seg(ISN, b"", SYN), Seg(s, b"ab", D)],
            events: vec![data(0, b"ab")],
            counts: (2, 0, 0, 0, 5),
        },
        Case {
            name: "strict mode with midstream starts at the first segment",
            config: config(Mode::TcpStrict, 1024, Cutoff::NONE, true),
            steps: vec![Seg(5000, b"mid", D), Seg(4998, b"xxyy", D), Seg(5003, b"dle", D)],
            events: vec![data(0, b"middle")],
            counts: (6, 0, 2, 0, 2),
        },
        Case {
            name: "fast mode picks a stream up midstream",
            config: fast(),
            steps: vec![Seg(7, b"abc", D), Seg(10, b"", FIN)],
            events: vec![data(0, b"abc"), Event::End(EndReason::Fin)],
            counts: (3, 0, 0, 0, 0),
        },
        Case {
            name: "data past the FIN is refused, also when it was held before the FIN came",
            config: fast(),
            steps: vec![Seg(ISN, b"", SYN), Seg(s + 4, b"efgh", D), Seg(s + 2, b"cd", FIN), Seg(s, b"abXY", D)],
            events: vec![data(0, b"abcd"), Event::End(EndReason::Fin)],
            counts: (4, 0, 2, 0, 4),
        },
        Case {
            name: "data with the SYN starts at offset 0",
            config: fast(),
            steps: vec![Seg(ISN, b"ab", SYN), Seg(s + 2, b"cd", D), Seg(ISN, b"ab", SYN)],
            events: vec![data(0, b"abcd")],
            counts: (4, 0, 2, 0, 0),
        },
        Case {
            name: "a retransmission after the FIN is a duplicate, data past it refused",
            config: fast(),
            steps: vec![Seg(ISN, b"", SYN), Seg(s, b"ab", FIN), Seg(s, b"abc", D)],
            events: vec![data(0, b"ab"), Event::End(EndReason::Fin)],
            counts: (2, 0, 2, 0, 1),
        },
        Case {
            name: "a flush gives up the offsets before bytes seen past the cutoff",
            config: config(Mode::TcpFast, 1024, Cutoff::after(4), false),
            steps: vec![Seg(ISN, b"", SYN), Seg(s + 2, b"cdef", D), Seg(s + 7, b"h", D), Flush, Seg(s, b"ab", D)],
            events: vec![Event::Gap(0, 2), data(2, b"cd")],
            counts: (2, 2, 2, 3, 0),
        },
        Case {
            name: "only bytes past the cutoff: the offsets before it are a gap once flushed",
            config: config(Mode::TcpFast, 1024, Cutoff::after(2), false),
            steps: vec![Seg(ISN, b"", SYN), Seg(s + 3, b"d", D), Flush, Seg(s + 4, b"", FIN)],
            events: vec![Event::Gap(0, 2), Event::End(EndReason::Fin)],
            counts: (0, 2, 0, 1, 0),
        },
        Case {
            name: "lowering the cutoff discards held bytes past it; below the next offset it stops there",
            config: fast(),
            steps: vec![Seg(ISN, b"", SYN), Seg(s, b"ab", D), Seg(s + 3, b"defg", D), SetCutoff(Cutoff::after(5)), Seg(s + 2, b"c", D)],
            events: vec![data(0, b"abcde")],
            counts: (5, 0, 0, 2, 0),
        },
        Case {
            name: "discarding the rest of a stream, then its FIN ends it",
            config: fast(),
            steps: vec![Seg(ISN, b"", SYN), Seg(s, b"ab", D), SetCutoff(Cutoff::after(0)), Seg(s + 2, b"cd", FIN)],
            events: vec![data(0, b"ab"), Event::End(EndReason::Fin)],
            counts: (2, 0, 0, 2, 0),
        },
        Case {
            name: "raising the cutoff: what was discarded is a gap, what follows is data",
            config: config(Mode::TcpFast, 1024, Cutoff::after(2), false),
            steps: vec![Seg(ISN, b"", SYN), Seg(s, b"abcd", D), SetCutoff(Cutoff::NONE), Seg(s + 4, b"ef", D), Flush],
            events: vec![data(0, b"ab"), Event::Gap(2, 2), data(4, b"ef")],
            counts: (4, 2, 0, 2, 0),
        },
        Case {
            name: "a stream ended at its cutoff stays ended when the cutoff is raised",
            config: config(Mode::TcpFast, 1024, Cutoff::after(2), false),
            steps: vec![Seg(ISN, b"", SYN), Seg(s + 4, b"", FIN), Seg(s, b"ab", D), SetCutoff(Cutoff::NONE), Seg(s + 2, b"cd", D)],
            events: vec![data(0, b"ab"), Event::End(EndReason::Fin)],
            counts: (2, 0, 0, 2, 0),
        },
        Case {
            name: "strict: bytes past the window are refused, their retransmission in a later window delivered",
            config: windowed(false),
            steps: vec![
                Seg(ISN, b"", SYN),
                Window(s, 4),
                Seg(s, b"abcdef", D),
                Window(s + 4, 4),
                Seg(s + 4, b"efgh", D),
                Seg(s + 8, b"", FIN),
                Window(s + 8, 1),
                Seg(s + 8, b"", FIN),
            ],
            events: vec![data(0, b"abcdefgh"), Event::End(EndReason::Fin)],
            counts: (8, 0, 0, 0, 2),
        },
        Case {
            name: "strict: a FIN past the window is refused, and a bare ACK after it does not make its number a gap",
            config: windowed(false),
            steps: vec![
                Seg(ISN, b"", SYN),
                Window(s, 2),
                Seg(s, b"ab", FIN),
                Window(s + 2, 10),
                Seg(s + 3, b"", D),
                Close(EndReason::EndOfInput),
            ],
            events: vec![data(0, b"ab"), Event::End(EndReason::EndOfInput)],
            counts: (2, 0, 0, 0, 0),
        },
        Case {
            name: "strict: the edge never moves back, and bytes held out of order stop at it",
            config: windowed(false),
            steps: vec![Seg(ISN, b"", SYN), Window(s, 6), Window(s + 2, 1), Seg(s + 4, b"efgh", D), Seg(s, b"abcd", D)],
            events: vec![data(0, b"abcdef")],
            counts: (6, 0, 0, 0, 2),
        },
        Case {
            name: "strict: a window before the stream has its offset 0 means nothing",
            config: windowed(true),
            steps: vec![Window(ISN, 1), Seg(s, b"abcd", D), Window(s + 4, 0), Seg(s + 4, b"e", D)],
            events: vec![data(0, b"abcd")],
            counts: (4, 0, 0, 0, 1),
        },
        Case {
            name: "the window is checked in strict mode only, and only when asked",
            config: Config { receive_window: true, ..fast() },
            steps: vec![Seg(ISN, b"", SYN), Window(s, 1), Seg(s, b"abcd", D)],
            events: vec![data(0, b"abcd")],
            counts: (4, 0, 0, 0, 0),
        },
        Case {
            name: "strict without the window check takes what lies past it",
            config: Config { receive_window: false, ..windowed(false) },
            steps: vec![Seg(ISN, b"", SYN), Window(s, 1), Seg(s, b"abcd", D)],
            events: vec![data(0, b"abcd")],
            counts: (4, 0, 0, 0, 0),
        },
        Case {
            name: "close flushes holes and says why; nothing follows",
            config: fast(),
            steps: vec![Seg(ISN, b"", SYN), Seg(s + 1, b"b", D), Close(EndReason::Timeout), Seg(s, b"a", D)],
            events: vec![Event::Gap(0, 1), data(1, b"b"), Event::End(EndReason::Timeout)],
            counts: (1, 1, 0, 0, 1),
        },
    ];
    for case in &cases {
        run_case(case);
    }
}

#[test]
fn hold_limit_is_checked() {
    assert!(HoldLimit::new(HoldLimit::MAX).is_ok());
    assert!(HoldLimit::new(HoldLimit::MAX + 1).is_err());
    assert_eq!(HoldLimit::new(0).unwrap().bytes(), 0);
}

#[test]
fn evicted_stream_ends_with_its_reason() {
    let mut r = Reassembler::new(fast());
    let mut sink = Recorder::default();
    r.segment(Segment { seq: 9, payload: b"x", flags: D }, &mut sink);
    r.close(EndReason::Evicted, &mut sink);
    assert!(r.is_ended());
    assert_eq!(sink.events, vec![data(0, b"x"), Event::End(EndReason::Evicted)]);
}

/// A small deterministic generator, so that one proptest seed gives one
/// whole scenario (the scenario's shape is what is random, not its size).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: enough spread for choosing cuts and orders.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
}

/// One segment of a scenario, by stream offset (offset 0 is the byte after
/// the SYN).
#[derive(Clone, Debug)]
struct Sent {
    offset: u64,
    bytes: Vec<u8>,
    fin: bool,
}

/// A stream of `len` bytes cut into segments, with some lost, some sent
/// twice, some overlapping retransmissions carrying different bytes, all in
/// a shuffled order.
fn scenario(rng: &mut Rng, len: u64, loss: u64, dup: u64, overlaps: u64) -> Vec<Sent> {
    let stream: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    let mut sent = Vec::new();
    let mut at = 0;
    while at < len {
        let n = (1 + rng.below(300)).min(len - at);
        let piece = Sent { offset: at, bytes: stream[at as usize..(at + n) as usize].to_vec(), fin: at + n == len };
        at += n;
        if rng.percent(loss) {
            continue;
        }
        if rng.percent(dup) {
            sent.push(piece.clone());
        }
        sent.push(piece);
    }
    for _ in 0..overlaps {
        if len == 0 {
            break;
        }
        let offset = rng.below(len);
        let n = 1 + rng.below((len - offset).min(400));
        sent.push(Sent { offset, bytes: (0..n).map(|_| rng.next() as u8).collect(), fin: false });
    }
    // Fisher-Yates, by the scenario's own generator.
    for i in (1..sent.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        sent.swap(i, j);
    }
    sent
}

/// The naive reference: the first byte seen at each offset, and the step at
/// which it was seen.
struct Model {
    first: Vec<Option<(u8, usize)>>,
}

impl Model {
    fn new(len: u64) -> Model {
        Model { first: vec![None; len as usize] }
    }

    fn see(&mut self, sent: &Sent, step: usize) {
        for (i, &b) in sent.bytes.iter().enumerate() {
            let slot = &mut self.first[sent.offset as usize + i];
            if slot.is_none() {
                *slot = Some((b, step));
            }
        }
    }
}

/// A recorder that also notes at which step each gap was reported.
#[derive(Default)]
struct StepRecorder {
    inner: Recorder,
    step: usize,
    gaps: Vec<(u64, u64, usize)>,
}

impl Sink for StepRecorder {
    fn data(&mut self, offset: u64, bytes: &[u8]) {
        self.inner.data(offset, bytes);
    }

    fn gap(&mut self, offset: u64, len: u64) {
        self.gaps.push((offset, len, self.step));
        self.inner.gap(offset, len);
    }

    fn end(&mut self, reason: EndReason) {
        self.inner.end(reason);
    }
}

/// Runs a scenario: the SYN first if `syn`, then every segment, with a flush
/// after a segment now and then if `flush_every` is not 0, then a close.
fn drive(isn: u32, config: Config, sent: &[Sent], flush_every: usize, syn: bool) -> (Reassembler, StepRecorder) {
    let mut r = Reassembler::new(config);
    let mut sink = StepRecorder::default();
    if syn {
        r.segment(Segment { seq: isn, payload: &[], flags: Flags::SYN }, &mut sink);
    }
    for (step, s) in sent.iter().enumerate() {
        sink.step = step;
        let seq = isn.wrapping_add(1).wrapping_add(s.offset as u32);
        r.segment(Segment { seq, payload: &s.bytes, flags: Flags { fin: s.fin, ..Flags::NONE } }, &mut sink);
        assert_identity(&r.counters());
        if flush_every != 0 && step % flush_every == flush_every - 1 {
            r.flush_gap(&mut sink);
        }
    }
    sink.step = sent.len();
    r.close(EndReason::EndOfInput, &mut sink);
    (r, sink)
}

/// The initial sequence number: anywhere, or close enough to 2^32 that the
/// stream crosses it.
fn isn() -> impl Strategy<Value = u32> {
    prop_oneof![any::<u32>(), (u32::MAX - 4000..=u32::MAX)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// With room to hold everything, the reassembler delivers exactly what
    /// the model saw first at each offset, a gap of exactly the right length
    /// for every run of offsets the model never saw (up to the FIN, or to the
    /// last byte seen), nothing past the cutoff, and every byte is counted.
    #[test]
    fn matches_the_byte_map_model(
        isn in isn(),
        seed in any::<u64>(),
        len in 0u64..3000,
        loss in 0u64..40,
        dup in 0u64..40,
        overlaps in 0u64..12,
        cutoff in prop_oneof![Just(None), (0u64..3500).prop_map(Some)],
    ) {
        let mut rng = Rng(seed | 1);
        let sent = scenario(&mut rng, len, loss, dup, overlaps);
        let mut model = Model::new(len);
        for (step, s) in sent.iter().enumerate() {
            model.see(s, step);
        }
        let fin_seen = sent.iter().any(|s| s.fin);
        let cut = cutoff.map_or(Cutoff::NONE, Cutoff::after);
        let config = config(Mode::TcpFast, HoldLimit::MAX, cut, false);
        let (r, sink) = drive(isn, config, &sent, 0, true);

        // What a first-copy-wins receiver reports: up to the FIN if it came,
        // else up to the last byte seen; never past the cutoff.
        let seen_end = model.first.iter().rposition(Option::is_some).map_or(0, |i| i as u64 + 1);
        let end = if fin_seen { len } else { seen_end }.min(cutoff.unwrap_or(u64::MAX));
        let mut expected = Vec::new();
        let mut o = 0;
        while o < end {
            let known = model.first[o as usize].is_some();
            let mut n = 0;
            while o + n < end && model.first[(o + n) as usize].is_some() == known {
                n += 1;
            }
            if known {
                let run = (o..o + n).map(|i| model.first[i as usize].unwrap().0).collect();
                expected.push(Event::Data(o, run));
            } else {
                expected.push(Event::Gap(o, n));
            }
            o += n;
        }
        expected.push(Event::End(if fin_seen { EndReason::Fin } else { EndReason::EndOfInput }));
        prop_assert_eq!(&sink.inner.events, &expected);

        let c = r.counters();
        let received: u64 = sent.iter().map(|s| s.bytes.len() as u64).sum();
        let past_cutoff: u64 = sent.iter().flat_map(|s| s.offset..s.offset + s.bytes.len() as u64).filter(|&o| o >= cutoff.unwrap_or(u64::MAX)).count() as u64;
        let delivered = (0..end).filter(|&o| model.first[o as usize].is_some()).count() as u64;
        prop_assert_eq!(c.received, received);
        prop_assert_eq!(c.delivered, delivered);
        prop_assert_eq!(c.gap, end - delivered);
        prop_assert_eq!(c.discarded_cutoff, past_cutoff);
        prop_assert_eq!(c.refused, 0);
        prop_assert_eq!(c.held, 0);
        prop_assert_eq!(c.duplicate, received - delivered - past_cutoff);
        prop_assert_eq!(r.next_offset(), end);
        prop_assert!(r.is_ended());
    }

    /// With a small hold limit and flushes along the way, holes are given up
    /// early: every delivered byte is still the first copy seen at its
    /// offset, a gap only covers offsets no byte had arrived for when it was
    /// reported, and every byte is still counted once. Without the SYN, the
    /// stream starts at the first segment to arrive (fast mode, or strict
    /// with midstream), and what lies before it is refused; strict mode
    /// without midstream refuses it all.
    #[test]
    fn gives_up_holes_without_losing_what_it_saw(
        isn in isn(),
        seed in any::<u64>(),
        len in 0u64..3000,
        loss in 0u64..40,
        dup in 0u64..40,
        overlaps in 0u64..12,
        hold in 0u64..700,
        flush_every in 0usize..8,
        strict in any::<bool>(),
        syn in any::<bool>(),
        midstream in any::<bool>(),
    ) {
        let mut rng = Rng(seed | 1);
        let sent = scenario(&mut rng, len, loss, dup, overlaps);
        let mut model = Model::new(len);
        for (step, s) in sent.iter().enumerate() {
            model.see(s, step);
        }
        let mode = if strict { Mode::TcpStrict } else { Mode::TcpFast };
        let (r, sink) = drive(isn, config(mode, hold, Cutoff::NONE, midstream), &sent, flush_every, syn);
        let c = r.counters();
        if !syn && strict && !midstream {
            prop_assert_eq!(c.refused, c.received);
            prop_assert!(sink.inner.events.len() <= 1, "data without a SYN in strict mode: {:?}", sink.inner.events);
        }
        // Where the reassembler's offset 0 lies in the scenario's stream.
        let origin = if syn { 0 } else { sent.first().map_or(0, |s| s.offset) };
        for event in &sink.inner.events {
            if let Event::Data(offset, bytes) = event {
                for (i, &b) in bytes.iter().enumerate() {
                    let o = (origin + offset) as usize + i;
                    prop_assert_eq!(Some(b), model.first[o].map(|(b, _)| b), "offset {} is not the first copy", o);
                }
            }
        }
        for &(offset, len, step) in &sink.gaps {
            for o in origin + offset..origin + offset + len {
                if let Some(&Some((_, seen))) = model.first.get(o as usize) {
                    prop_assert!(seen > step, "offset {} was seen at step {} but reported as a gap at step {}", o, seen, step);
                }
            }
        }
        let before_origin: u64 = sent.iter().map(|s| origin.saturating_sub(s.offset).min(s.bytes.len() as u64)).sum();
        if syn || !strict || midstream {
            prop_assert_eq!(c.refused, before_origin);
        }
        prop_assert_eq!(c.held, 0);
        prop_assert_eq!(c.received, c.delivered + c.duplicate + c.discarded_cutoff + c.refused);
        prop_assert_eq!(r.next_offset(), c.delivered + c.gap);
        prop_assert!(r.is_ended());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// In strict mode with the window checked, the reassembler takes what a
    /// naive receiver takes, byte by byte in arrival order: a byte behind
    /// everything taken in order is a duplicate; else one at or past the
    /// furthest right edge advertised so far (any, once one was) is refused;
    /// else the first copy at its offset is kept. The FIN counts only when
    /// its sequence number lies inside the window. Windows come at random
    /// between segments, with acknowledgment numbers anywhere in the stream
    /// and sizes from 0, so some arrive after data was taken past them.
    #[test]
    fn refuses_what_lies_past_the_receivers_window(
        isn in isn(),
        seed in any::<u64>(),
        len in 0u64..3000,
        loss in 0u64..40,
        dup in 0u64..40,
        overlaps in 0u64..12,
        adverts in 0u64..100,
        max_window in 0u64..800,
    ) {
        let mut rng = Rng(seed | 1);
        let sent = scenario(&mut rng, len, loss, dup, overlaps);
        let mut r = Reassembler::new(windowed(false));
        let mut sink = Recorder::default();
        r.segment(Segment { seq: isn, payload: &[], flags: Flags::SYN }, &mut sink);

        let mut first: Vec<Option<u8>> = vec![None; len as usize];
        let (mut next, mut edge, mut fin, mut seen_end) = (0u64, None::<u64>, false, 0u64);
        let (mut refused, mut duplicate) = (0u64, 0u64);
        for s in &sent {
            if rng.percent(adverts) {
                let (ack, window) = (rng.below(len + 1), rng.below(max_window + 1));
                r.advertise(isn.wrapping_add(1).wrapping_add(ack as u32), window);
                edge = Some(edge.map_or(ack + window, |e: u64| e.max(ack + window)));
            }
            let seq = isn.wrapping_add(1).wrapping_add(s.offset as u32);
            r.segment(Segment { seq, payload: &s.bytes, flags: Flags { fin: s.fin, ..Flags::NONE } }, &mut sink);

            let limit = edge.unwrap_or(u64::MAX);
            if s.fin && !fin && len < limit {
                fin = true;
            }
            if !s.bytes.is_empty() {
                seen_end = seen_end.max((s.offset + s.bytes.len() as u64).min(limit));
            }
            for (i, &b) in s.bytes.iter().enumerate() {
                let o = s.offset + i as u64;
                if o < next {
                    duplicate += 1;
                } else if o >= limit {
                    refused += 1;
                } else if first[o as usize].is_some() {
                    duplicate += 1;
                } else {
                    first[o as usize] = Some(b);
                }
            }
            while next < len && first[next as usize].is_some() {
                next += 1;
            }
        }
        r.close(EndReason::EndOfInput, &mut sink);

        let end = if fin { len } else { seen_end.max(next) };
        let mut expected = Vec::new();
        let mut o = 0;
        while o < end {
            let known = first[o as usize].is_some();
            let mut n = 0;
            while o + n < end && first[(o + n) as usize].is_some() == known {
                n += 1;
            }
            if known {
                expected.push(Event::Data(o, (o..o + n).map(|i| first[i as usize].unwrap()).collect()));
            } else {
                expected.push(Event::Gap(o, n));
            }
            o += n;
        }
        expected.push(Event::End(if fin { EndReason::Fin } else { EndReason::EndOfInput }));
        prop_assert_eq!(&sink.events, &expected);
        let c = r.counters();
        prop_assert_eq!((c.refused, c.duplicate, c.held), (refused, duplicate, 0));
        prop_assert_eq!(c.delivered, first.iter().filter(|b| b.is_some()).count() as u64);
        assert_identity(&c);
    }
}
