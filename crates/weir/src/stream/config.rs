//! How the stream layer is set up: the mode, cutoffs and classes, pieces,
//! timeouts, the table and the memory arena, checked against each other
//! before a run ([`StreamConfig::check`]).

use super::fragment::FragLimits;
use super::reassembly::{HoldLimit, OverlapPolicy};
use crate::filter::{Filter, FilterEngine};
use crate::{LinkType, Setting, SettingError};

/// How much of a stream's payload the layer rebuilds.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Streams are tracked (records, events, cutoff, packets on request) but
    /// no payload is reassembled or buffered: no data events.
    Packets,
    /// TCP bytes in order as they come; out-of-order bytes held up to the hold
    /// limit, then the hole becomes a gap. Streams are picked up midstream.
    #[default]
    TcpFast,
    /// TCP bytes as the receiving TCP accepts them: nothing before the
    /// handshake unless midstream pickup is allowed, nothing past the
    /// receiver's advertised window unless
    /// [`receive_window`](StreamConfig::receive_window) is off.
    TcpStrict,
}

impl Mode {
    /// The name the command line and records use for it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Packets => "packets",
            Mode::TcpFast => "tcp-fast",
            Mode::TcpStrict => "tcp-strict",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = ParseModeError;
    fn from_str(s: &str) -> Result<Mode, ParseModeError> {
        [Mode::Packets, Mode::TcpFast, Mode::TcpStrict]
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| ParseModeError { given: s.to_owned() })
    }
}

/// A name that is not a [`Mode`]'s (`packets`, `tcp-fast` or `tcp-strict`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{given}` is not a stream mode (packets, tcp-fast, tcp-strict)")]
pub struct ParseModeError {
    given: String,
}

impl ParseModeError {
    /// The name as given.
    pub fn given(&self) -> &str {
        &self.given
    }
}

/// Priorities a stream can have: 0 (lowest, the default) to `PRIORITIES - 1`.
pub const PRIORITIES: u8 = 4;

/// A class of traffic, selected by a libpcap filter expression run on a
/// stream's first packet, with settings that override the engine's for the
/// streams it selects. The first class (in the order added) that matches wins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Class {
    /// The filter expression (libpcap syntax).
    pub expression: String,
    /// The class's cutoff; `None` keeps the engine's.
    pub cutoff: Option<Option<u64>>,
    /// The class's mode; `None` keeps the engine's.
    pub mode: Option<Mode>,
    /// The class's priority; `None` keeps 0.
    pub priority: Option<u8>,
}

impl Class {
    /// A class of the streams `expression` matches, with no override yet.
    pub fn new(expression: impl Into<String>) -> Class {
        Class { expression: expression.into(), cutoff: None, mode: None, priority: None }
    }

    /// Parses the command line's `EXPR=BYTES` (a cutoff class): the last `=`
    /// splits, so the expression may hold one.
    ///
    /// # Errors
    ///
    /// [`ParseCutoffClassError`], naming the text and the part at fault.
    pub fn parse_cutoff(text: &str) -> Result<Class, ParseCutoffClassError> {
        let (expr, bytes) = text.rsplit_once('=').ok_or_else(|| ParseCutoffClassError::NoEquals { text: text.to_owned() })?;
        let bytes: u64 =
            bytes.trim().parse().map_err(|_| ParseCutoffClassError::Bytes { text: text.to_owned(), bytes: bytes.to_owned() })?;
        if expr.trim().is_empty() {
            return Err(ParseCutoffClassError::NoExpression { text: text.to_owned() });
        }
        Ok(Class { cutoff: Some(Some(bytes)), ..Class::new(expr.trim()) })
    }

    /// Parses the command line's `EXPR;KEY=VALUE,...`: a class with any of
    /// `cutoff=BYTES|none`, `mode=packets|tcp-fast|tcp-strict` and
    /// `priority=0..3`. Text without a `;` is the short form `EXPR=BYTES`
    /// ([`parse_cutoff`](Self::parse_cutoff)). The last `;` splits: libpcap's
    /// filter language has no `;`, so no expression is cut short by it.
    ///
    /// # Errors
    ///
    /// [`ParseClassError`], naming the text and the part at fault.
    pub fn parse(text: &str) -> Result<Class, ParseClassError> {
        let owned = || text.to_owned();
        let Some((expr, settings)) = text.rsplit_once(';') else {
            if !text.contains('=') {
                return Err(ParseClassError::Form { text: owned() });
            }
            return Ok(Class::parse_cutoff(text)?);
        };
        if expr.trim().is_empty() {
            return Err(ParseClassError::NoExpression { text: owned() });
        }
        let mut class = Class::new(expr.trim());
        if settings.trim().is_empty() {
            return Err(ParseClassError::NoSettings { text: owned() });
        }
        for part in settings.split(',') {
            let (key, value) =
                part.split_once('=').ok_or_else(|| ParseClassError::NotKeyValue { text: owned(), part: part.trim().to_owned() })?;
            let (key, value) = (key.trim(), value.trim());
            let twice = match key {
                "cutoff" => class
                    .cutoff
                    .replace(match value {
                        "none" => None,
                        n => Some(n.parse().map_err(|_| ParseClassError::Cutoff { text: owned(), value: n.to_owned() })?),
                    })
                    .is_some(),
                "mode" => class.mode.replace(value.parse().map_err(|error| ParseClassError::Mode { text: owned(), error })?).is_some(),
                "priority" => {
                    let p = value
                        .parse()
                        .ok()
                        .filter(|&p| p < PRIORITIES)
                        .ok_or_else(|| ParseClassError::Priority { text: owned(), value: value.to_owned() })?;
                    class.priority.replace(p).is_some()
                }
                other => return Err(ParseClassError::UnknownKey { text: owned(), key: other.to_owned() }),
            };
            if twice {
                return Err(ParseClassError::Twice { text: owned(), key: key.to_owned() });
            }
        }
        Ok(class)
    }
}

/// Why [`Class::parse_cutoff`] refused its `EXPR=BYTES`. Each message quotes
/// the text given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseCutoffClassError {
    /// No `=` in the text.
    #[error("`{text}` is not EXPR=BYTES")]
    NoEquals {
        /// The text given.
        text: String,
    },
    /// What follows the last `=` is not a whole number.
    #[error("`{bytes}` in `{text}` is not a number of bytes")]
    Bytes {
        /// The text given.
        text: String,
        /// What stands for the bytes.
        bytes: String,
    },
    /// Nothing but blanks before the `=`.
    #[error("`{text}` has no filter expression before the `=`")]
    NoExpression {
        /// The text given.
        text: String,
    },
}

/// Why [`Class::parse`] refused its `EXPR;KEY=VALUE,...`. Each message quotes
/// the text given, and the key or value at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseClassError {
    /// Neither a `;` nor an `=` in the text.
    #[error("`{text}` is neither EXPR;KEY=VALUE,... nor EXPR=BYTES")]
    Form {
        /// The text given.
        text: String,
    },
    /// The short form `EXPR=BYTES` was refused.
    #[error(transparent)]
    Short(#[from] ParseCutoffClassError),
    /// Nothing but blanks before the `;`.
    #[error("`{text}` has no filter expression before the `;`")]
    NoExpression {
        /// The text given.
        text: String,
    },
    /// Nothing but blanks after the `;`.
    #[error("`{text}` has no settings after the `;` (cutoff=BYTES, mode=MODE, priority=P)")]
    NoSettings {
        /// The text given.
        text: String,
    },
    /// A setting without an `=`.
    #[error("`{part}` in `{text}` is not KEY=VALUE")]
    NotKeyValue {
        /// The text given.
        text: String,
        /// The setting, trimmed.
        part: String,
    },
    /// `cutoff=` is neither a whole number nor `none`.
    #[error("cutoff `{value}` in `{text}` is not a number of bytes or `none`")]
    Cutoff {
        /// The text given.
        text: String,
        /// The value given for the cutoff.
        value: String,
    },
    /// `mode=` names no [`Mode`]. The mode's error is in the message, not
    /// chained as a source, so printing the chain does not say it twice.
    #[error("{error} in `{text}`")]
    Mode {
        /// The text given.
        text: String,
        /// The mode's own error.
        error: ParseModeError,
    },
    /// `priority=` is not one of 0 to [`PRIORITIES`] − 1.
    #[error("priority `{value}` in `{text}` is not one of 0 to {max}", max = PRIORITIES - 1)]
    Priority {
        /// The text given.
        text: String,
        /// The value given for the priority.
        value: String,
    },
    /// A key other than `cutoff`, `mode` and `priority`.
    #[error("`{key}` in `{text}` is not a class setting (cutoff, mode, priority)")]
    UnknownKey {
        /// The text given.
        text: String,
        /// The key given.
        key: String,
    },
    /// A key given twice.
    #[error("`{key}` is given twice in `{text}`")]
    Twice {
        /// The text given.
        text: String,
        /// The key given twice.
        key: String,
    },
}

/// The stream layer's settings. Build with the `with_`/`set` methods, then
/// [`check`](Self::check) them (the engine does before it runs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamConfig {
    /// Reassembly mode, for streams no class overrides.
    pub mode: Mode,
    /// Which copy of an overlapped byte wins (first copy).
    pub overlap: OverlapPolicy,
    /// In [`Mode::TcpStrict`], pick up streams whose SYN was not seen.
    pub midstream: bool,
    /// In [`Mode::TcpStrict`], refuse data at or past the right edge of the
    /// receiver's advertised window, as the receiving TCP does (RFC 9293
    /// segment acceptability; windows scaled as the SYNs' options say, or by
    /// the largest shift when a SYN was not seen). On by default.
    pub receive_window: bool,
    /// Bytes of one stream held out of order before its first hole becomes a
    /// gap.
    pub hold_limit: HoldLimit,
    /// The cutoff of every stream no class overrides: bytes delivered before
    /// the rest is discarded. `Some(0)`: statistics only.
    pub cutoff: Option<u64>,
    /// Classes, first match wins.
    pub classes: Vec<Class>,
    /// Bytes per data piece handed to the application.
    pub piece: usize,
    /// Bytes of the previous piece repeated at the start of the next (for
    /// matching across the boundary); less than `piece`.
    pub piece_overlap: usize,
    /// A partial piece waiting longer than this (packet time) is delivered
    /// at the next packet of its queue, or when the worker finds its queue
    /// empty, packet time then moving on with the wall clock (within about
    /// 0.1 s of the timeout on a quiet link); `None`: only when full or at
    /// the end.
    pub flush_timeout_ns: Option<u64>,
    /// A stream with no packet for this long (packet time, moving on with
    /// the wall clock while the worker is idle, as for the flush timeout) is
    /// closed.
    pub idle_timeout_ns: u64,
    /// Most connections (stream pairs) tracked at once, for the whole engine;
    /// each queue's table gets its share.
    pub max_connections: usize,
    /// Bytes of reassembly memory (held out-of-order bytes and partial
    /// pieces) for the whole engine; each queue's arena gets its share.
    pub memory: u64,
    /// Above this share of the arena (percent), streams are admitted new
    /// held bytes by priority.
    pub base_percent: u8,
    /// Above this share of the arena (percent), every stream keeps only its
    /// first `overload_keep` bytes.
    pub overload_percent: u8,
    /// Bytes of each stream still taken above the overload threshold.
    pub overload_keep: u64,
    /// Limits of IP fragment reassembly, per queue.
    pub fragments: FragLimits,
    /// Flow records rather than streams (what a flow exporter needs; the
    /// cutoff must be 0 and no class may be set): every IP datagram
    /// belongs to a stream, so a TCP packet of no open stream (a bare ACK
    /// of a connection seen midway) starts one instead of being counted
    /// untracked; and a FIN or RST no longer closes a stream at once: it
    /// stays open, counting the packets that follow (the ACK of the FIN),
    /// until its connection is idle, evicted, reused or the input ends,
    /// and its record's [`closed`](super::Stream::closed) then says FIN or
    /// RST.
    pub flows: bool,
    /// In flows mode: a stream open this long (packet time) since its
    /// record started hands that record out at its next packet
    /// ([`StreamHandler::active`](super::StreamHandler::active)) and starts a
    /// new one. `None`: never.
    pub active_timeout_ns: Option<u64>,
    /// With a kernel cutoff: a direction past its cutoff is installed in
    /// the kernel's flow map only once this many of its packets reached
    /// weir (1: at once). An install and the read that ends it are a
    /// bpf(2) call each, a few microseconds: more than weir spends on a
    /// handful of packets, so a short direction costs less left in user
    /// space, and the map keeps its room for the long ones.
    pub kernel_install_after: u64,
    /// What runs the classes' filters: the JIT by default, or the interpreter.
    pub filter_engine: FilterEngine,
    /// Connections (all queues together, at most `max_connections`) whose
    /// two directions' memory is allocated and written when the layer is
    /// made, before the first packet, and kept for reuse: first touching
    /// fresh memory for each new direction (the kernel clearing its page)
    /// was a third of a live worker's time at 10^5 new connections.
    pub prealloc_connections: usize,
}

impl Default for StreamConfig {
    fn default() -> StreamConfig {
        StreamConfig {
            mode: Mode::TcpFast,
            overlap: OverlapPolicy::FirstCopyWins,
            midstream: false,
            receive_window: true,
            hold_limit: HoldLimit::default(),
            cutoff: None,
            classes: Vec::new(),
            piece: 16 * 1024,
            piece_overlap: 0,
            flush_timeout_ns: None,
            // Zeek's TCP inactivity timeout; UDP shares it.
            idle_timeout_ns: 300 * 1_000_000_000,
            max_connections: 1_000_000,
            // Suricata's default reassembly memcap. Past half of it partial
            // pieces are delivered early rather than held (see the arena),
            // so a larger budget mostly holds in-order bytes waiting for a
            // full piece: at 10^5 concurrent streams, 1 GiB made the
            // 2-million-packet benchmark hold 512 MiB of them, and first
            // touching that memory cost this VM up to 2 s of kernel time
            // (clear_page), against 0.2-0.3 s at 256 MiB.
            memory: 256 << 20,
            base_percent: 50,
            overload_percent: 90,
            overload_keep: 4096,
            fragments: FragLimits::default(),
            flows: false,
            active_timeout_ns: None,
            kernel_install_after: KERNEL_INSTALL_AFTER,
            filter_engine: FilterEngine::default(),
            prealloc_connections: PREALLOC_CONNECTIONS,
        }
    }
}

/// The default of [`StreamConfig::prealloc_connections`]: Suricata's
/// `flow.prealloc`.
pub const PREALLOC_CONNECTIONS: usize = 10_000;

/// The default of [`StreamConfig::kernel_install_after`]: see `bench/streams_live.py`.
pub const KERNEL_INSTALL_AFTER: u64 = 16;

/// Largest piece: 16 MiB.
pub const MAX_PIECE: usize = 16 << 20;

impl StreamConfig {
    /// Checks the settings against each other.
    pub fn check(&self) -> Result<(), SettingError> {
        let bad = |problem: String| Err(SettingError::new(Setting::Streams, problem));
        if self.piece == 0 || self.piece > MAX_PIECE {
            return bad(format!("the piece size must be from 1 to {MAX_PIECE} bytes, not {}", self.piece));
        }
        if self.piece_overlap >= self.piece {
            return bad(format!("the piece overlap ({}) must be less than the piece size ({})", self.piece_overlap, self.piece));
        }
        if self.max_connections == 0 || self.max_connections >= u32::MAX as usize {
            return bad(format!("the stream table holds 1 to {} connections, not {}", u32::MAX - 1, self.max_connections));
        }
        if self.idle_timeout_ns == 0 {
            return bad("the idle timeout must be more than 0".into());
        }
        if !(self.base_percent < self.overload_percent && self.overload_percent <= 100) {
            return bad(format!(
                "the memory thresholds must be base < overload <= 100 percent, not {} and {}",
                self.base_percent, self.overload_percent
            ));
        }
        if self.flows && (self.cutoff != Some(0) || !self.classes.is_empty()) {
            return bad("flows mode keeps statistics only: its cutoff must be 0, with no class".into());
        }
        if self.active_timeout_ns.is_some() && !self.flows {
            return bad("an active timeout applies to flows mode only".into());
        }
        if self.active_timeout_ns == Some(0) {
            return bad("the active timeout must be more than 0".into());
        }
        for c in &self.classes {
            if c.priority.is_some_and(|p| p >= PRIORITIES) {
                return bad(format!("class `{}`: priorities are 0 to {}", c.expression, PRIORITIES - 1));
            }
        }
        Ok(())
    }

    /// The share of the table and arena of one queue among `queues`.
    pub(crate) fn per_queue(&self, queues: usize) -> (usize, u64) {
        let q = queues.max(1);
        (self.max_connections.div_ceil(q).max(1), self.memory / q as u64)
    }

    /// Compiles the classes' expressions for `link`.
    pub(crate) fn compile_classes(&self, link: LinkType) -> Result<Vec<(Filter, Class)>, SettingError> {
        self.classes
            .iter()
            .map(|c| {
                Filter::compile(&c.expression, link, 262_144)
                    .map(|f| (f.with_engine(self.filter_engine), c.clone()))
                    .map_err(|e| SettingError::new(Setting::Streams, format!("class `{}`: {e}", c.expression)))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_run_on_the_configured_filter_engine() {
        let engine_of = |filter_engine| {
            let cfg = StreamConfig { classes: vec![Class::new("tcp port 80")], filter_engine, ..StreamConfig::default() };
            cfg.compile_classes(LinkType::ETHERNET).unwrap()[0].0.engine()
        };
        assert_eq!(engine_of(FilterEngine::Interp), FilterEngine::Interp);
        let jit = if cfg!(target_arch = "x86_64") { FilterEngine::Jit } else { FilterEngine::Interp };
        assert_eq!(engine_of(FilterEngine::Jit), jit);
        assert_eq!(StreamConfig::default().filter_engine, FilterEngine::Jit);
    }

    #[test]
    fn class_specs_parse_or_name_their_bad_part() {
        let class = |expr: &str, cutoff, mode, priority| Class { cutoff, mode, priority, ..Class::new(expr) };
        for (text, want) in [
            ("tcp port 80;cutoff=100", class("tcp port 80", Some(Some(100)), None, None)),
            ("tcp port 80;cutoff=none", class("tcp port 80", Some(None), None, None)),
            ("udp ; mode=packets , priority=3", class("udp", None, Some(Mode::Packets), Some(3))),
            ("ip[8]=64;priority=1,mode=tcp-strict,cutoff=0", class("ip[8]=64", Some(Some(0)), Some(Mode::TcpStrict), Some(1))),
            // Without a `;`, the short form: the last `=` splits.
            ("ip[8]=64=10", class("ip[8]=64", Some(Some(10)), None, None)),
        ] {
            assert_eq!(Class::parse(text), Ok(want), "{text}");
        }
        for (text, says) in [
            ("tcp", "neither EXPR;KEY=VALUE,... nor EXPR=BYTES"),
            (";cutoff=1", "no filter expression"),
            ("tcp;", "no settings after the `;`"),
            ("tcp;cutoff", "`cutoff` in `tcp;cutoff` is not KEY=VALUE"),
            ("tcp;cutoff=-1", "cutoff `-1`"),
            ("tcp;mode=fast", "`fast` is not a stream mode"),
            ("tcp;priority=4", "priority `4` in `tcp;priority=4` is not one of 0 to 3"),
            ("tcp;prio=1", "`prio` in `tcp;prio=1` is not a class setting"),
            ("tcp;cutoff=1,cutoff=2", "`cutoff` is given twice"),
        ] {
            let e = Class::parse(text).expect_err(text).to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
        let err = |text| Class::parse(text).expect_err(text);
        assert_eq!(err("tcp;priority=9"), ParseClassError::Priority { text: "tcp;priority=9".into(), value: "9".into() });
        assert_eq!(
            err("tcp;mode=fast"),
            ParseClassError::Mode { text: "tcp;mode=fast".into(), error: "fast".parse::<Mode>().unwrap_err() }
        );
        assert_eq!(
            err("tcp=x"),
            ParseClassError::Short(ParseCutoffClassError::Bytes { text: "tcp=x".into(), bytes: "x".into() }),
            "the short form's error is the cutoff class's"
        );
        assert_eq!(Class::parse_cutoff("=5"), Err(ParseCutoffClassError::NoExpression { text: "=5".into() }));
        assert_eq!(Class::parse_cutoff("tcp"), Err(ParseCutoffClassError::NoEquals { text: "tcp".into() }));
        assert_eq!("udp".parse::<Mode>().unwrap_err().given(), "udp");
    }
}
