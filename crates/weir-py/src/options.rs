//! Keyword arguments into engine settings: every option of `weir count`
//! (crates/weir-cli/src/run.rs) as a keyword of the same name in snake case,
//! turned into the same `weir::Engine::builder()` calls through the
//! library's own parsers (source names, `M,R` pools, balance modes, CPU
//! lists, fanout modes), with the same ranges as the CLI's.
//!
//! A keyword nobody takes is a `TypeError`, as Python gives for a function
//! with a fixed signature; a value of the wrong type is a `TypeError` naming
//! the keyword; a value out of range, or that the library refuses, is a
//! `weir.BadInputError` naming the keyword.

use crate::errors::{bad_option, build_error, setting_error, BadInputError};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyList, PyTuple};
use std::path::PathBuf;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;
use weir::engine::CpuPlan;
use weir::locality::{BatchSize, LocalityConfig, MAX_BATCH};
use weir::source::file::TraceAccess;
use weir::source::{AfPacketOptions, AfXdpOptions, Fanout, LiveOptions, Pacing, QueueRange, SourceSpec, XdpOptions, ZeroCopy};
use weir::{Engine, EngineBuilder, PoolConfig};

/// The keyword arguments of one call, taken one by one.
pub struct Kwargs<'py> {
    func: &'static str,
    dict: Bound<'py, PyDict>,
}

/// Ten years, the longest duration any option takes (as the CLI's).
const TEN_YEARS: f64 = 10.0 * 365.25 * 86_400.0;

impl<'py> Kwargs<'py> {
    /// The options of a call of `func` (for messages), copied so that taking
    /// them leaves the caller's dict alone.
    pub fn new(py: Python<'py>, func: &'static str, options: Option<&Bound<'py, PyDict>>) -> PyResult<Kwargs<'py>> {
        let dict = match options {
            Some(d) => d.copy()?,
            None => PyDict::new(py),
        };
        Ok(Kwargs { func, dict })
    }

    /// The value of `key`, removed; `None` when absent or given as None.
    pub fn take(&self, key: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(v) = self.dict.get_item(key)? else { return Ok(None) };
        self.dict.del_item(key)?;
        Ok((!v.is_none()).then_some(v))
    }

    fn wrong_type(&self, key: &str, want: &str, v: &Bound<'py, PyAny>) -> PyErr {
        let got = v.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
        PyTypeError::new_err(format!("{}(): {key} must be {want}, not {got}", self.func))
    }

    /// A string option (`str` or, where `path` is set, any `os.PathLike`).
    pub fn string(&self, key: &str) -> PyResult<Option<String>> {
        let Some(v) = self.take(key)? else { return Ok(None) };
        v.extract::<String>().map(Some).map_err(|_| self.wrong_type(key, "a str", &v))
    }

    /// A path option: `str` or `os.PathLike`.
    pub fn path(&self, key: &str) -> PyResult<Option<PathBuf>> {
        let Some(v) = self.take(key)? else { return Ok(None) };
        v.extract::<PathBuf>().map(Some).map_err(|_| self.wrong_type(key, "a str or os.PathLike", &v))
    }

    /// A yes/no option.
    pub fn flag(&self, key: &str, default: bool) -> PyResult<bool> {
        let Some(v) = self.take(key)? else { return Ok(default) };
        v.extract::<bool>().map_err(|_| self.wrong_type(key, "a bool", &v))
    }

    /// An integer option within `lo..=hi`.
    pub fn int(&self, key: &str, lo: u64, hi: u64) -> PyResult<Option<u64>> {
        let Some(v) = self.take(key)? else { return Ok(None) };
        if v.is_instance_of::<pyo3::types::PyBool>() {
            return Err(self.wrong_type(key, "an int", &v));
        }
        let n: i128 = v.extract().map_err(|_| self.wrong_type(key, "an int", &v))?;
        match u64::try_from(n) {
            Ok(n) if (lo..=hi).contains(&n) => Ok(Some(n)),
            _ => Err(bad_option(key, format!("{n} is out of range: must be from {lo} to {hi}"))),
        }
    }

    /// A number option within `lo..=hi`.
    pub fn float(&self, key: &str, lo: f64, hi: f64) -> PyResult<Option<f64>> {
        let Some(v) = self.take(key)? else { return Ok(None) };
        if v.is_instance_of::<pyo3::types::PyBool>() {
            return Err(self.wrong_type(key, "a number", &v));
        }
        let x: f64 = v.extract().map_err(|_| self.wrong_type(key, "a number", &v))?;
        if x.is_finite() && (lo..=hi).contains(&x) {
            Ok(Some(x))
        } else {
            Err(bad_option(key, format!("{x} is out of range: must be from {lo} to {hi}")))
        }
    }

    /// A list option given as a string (`"0,1"`), or a list or tuple of ints
    /// (`[0, 1]`), as the comma-separated text the library parses.
    pub fn list_text(&self, key: &str) -> PyResult<Option<String>> {
        let Some(v) = self.take(key)? else { return Ok(None) };
        if let Ok(s) = v.extract::<String>() {
            return Ok(Some(s));
        }
        if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
            if let Ok(items) = v.extract::<Vec<u64>>() {
                return Ok(Some(items.iter().map(u64::to_string).collect::<Vec<_>>().join(",")));
            }
        }
        Err(self.wrong_type(key, "a str or a sequence of ints", &v))
    }

    /// A list of strings (or one string, a list of one).
    pub fn take_list(&self, key: &str) -> PyResult<Option<Vec<String>>> {
        let Some(v) = self.take(key)? else { return Ok(None) };
        if let Ok(s) = v.extract::<String>() {
            return Ok(Some(vec![s]));
        }
        v.extract::<Vec<String>>().map(Some).map_err(|_| self.wrong_type(key, "a list of str", &v))
    }

    /// Every keyword was taken: a leftover is one nobody knows.
    pub fn finish(self) -> PyResult<()> {
        if let Some((k, _)) = self.dict.iter().next() {
            return Err(PyTypeError::new_err(format!("{}() got an unexpected keyword argument {}", self.func, k.repr()?)));
        }
        Ok(())
    }
}

/// How an engine is to be built, parsed from the keywords; building it
/// needs no Python, so it can happen with the GIL released.
pub struct EngineOptions {
    spec: SourceSpec,
    filter: Option<String>,
    filter_engine: weir::filter::FilterEngine,
    packets: Option<u64>,
    duration: Option<Duration>,
    pacing: Pacing,
    pool: Option<PoolConfig>,
    trace_access: TraceAccess,
    cpus: Option<CpuPlan>,
    balance: weir::BalanceMode,
    locality: Option<LocalityConfig>,
    live: LiveOptions,
}

/// A source name that does not parse, said once: the library's message
/// names the source itself when it can, and is prefixed with it otherwise.
fn spec_error(source: &str, e: weir::source::SpecError) -> PyErr {
    let quoted = format!("{source:?}");
    let msg = e.to_string();
    if msg.contains(&quoted) {
        BadInputError::new_err(msg)
    } else {
        BadInputError::new_err(format!("source {quoted}: {msg}"))
    }
}

/// `queues=`: a count (`4` is queues 0 to 3) or a range as the source names
/// take it (`"0-3"`, `"2"`).
fn queue_range(k: &Kwargs<'_>) -> PyResult<Option<QueueRange>> {
    let Some(v) = k.take("queues")? else { return Ok(None) };
    let text = if let Ok(n) = v.extract::<i64>() {
        if v.is_instance_of::<pyo3::types::PyBool>() || !(1..=1024).contains(&n) {
            return Err(bad_option("queues", format!("{n}: give a count from 1 to 1024, or a range such as \"0-3\"")));
        }
        format!("0-{}", n - 1)
    } else if let Ok(s) = v.extract::<String>() {
        s
    } else {
        return Err(k.wrong_type("queues", "an int or a str", &v));
    };
    text.parse().map(Some).map_err(|e| bad_option("queues", e))
}

impl EngineOptions {
    /// Takes the engine's keywords out of `k` (the others stay for the caller).
    pub fn take(source: &str, k: &Kwargs<'_>) -> PyResult<EngineOptions> {
        let mut spec: SourceSpec = source.parse().map_err(|e| spec_error(source, e))?;
        if let Some(range) = queue_range(k)? {
            match &mut spec {
                SourceSpec::File { queues, .. } if *queues == QueueRange::single() => *queues = range,
                SourceSpec::Live { queues: q @ None, .. } => *q = Some(range),
                _ => {
                    return Err(bad_option(
                        "queues",
                        format!("the source {source:?} names its queues already (after its @): give them once"),
                    ))
                }
            }
        }
        let filter = k.string("filter")?;
        let filter_engine = match k.string("filter_engine")? {
            Some(s) => s.parse().map_err(|e| bad_option("filter_engine", e))?,
            None => weir::filter::FilterEngine::default(),
        };
        let packets = k.int("packets", 1, u64::MAX)?;
        let duration = k.float("duration", 0.001, TEN_YEARS)?.map(Duration::from_secs_f64);
        let paces = [("pps", k.float("pps", 0.001, 1e9)?), ("mbps", k.float("mbps", 0.001, 1e7)?), ("speed", k.float("speed", 1e-6, 1e6)?)];
        let given: Vec<&str> = paces.iter().filter(|(_, v)| v.is_some()).map(|(n, _)| *n).collect();
        if given.len() > 1 {
            return Err(BadInputError::new_err(format!("{} pace a trace in different ways: give one of them", given.join(" and "))));
        }
        let pacing = match paces {
            [(_, Some(v)), _, _] => Pacing::Pps(v),
            [_, (_, Some(v)), _] => Pacing::Mbps(v),
            [_, _, (_, Some(v))] => Pacing::Speed(v),
            _ => Pacing::TopSpeed,
        };
        let pacing = pacing.checked().map_err(|e| setting_error(&e))?;
        let pool = match k.take("pool")? {
            None => None,
            Some(v) => {
                let text = match v.cast::<PyTuple>() {
                    // Any two ints, so that one out of range is told so by the
                    // pool's own parser, not taken for a wrong type.
                    Ok(t) if t.len() == 2 && t.iter().all(|x| x.is_instance_of::<PyInt>()) => {
                        format!("{},{}", t.get_item(0)?.str()?, t.get_item(1)?.str()?)
                    }
                    _ => v.extract::<String>().map_err(|_| k.wrong_type("pool", "a str \"M,R\" or a tuple (M, R) of ints", &v))?,
                };
                Some(text.parse::<PoolConfig>().map_err(|e| bad_option("pool", format!("{text:?}: {e}")))?)
            }
        };
        let trace_access = match k.string("trace_access")? {
            Some(s) => s.parse().map_err(|e| setting_error(&e))?,
            None => TraceAccess::default(),
        };
        let cpus = match k.list_text("cpus")? {
            Some(s) => Some(s.parse::<CpuPlan>().map_err(|e| setting_error(&e))?),
            None => None,
        };
        let balance = match k.string("balance")? {
            Some(s) => s.parse().map_err(|e| setting_error(&e))?,
            None => weir::BalanceMode::Basic,
        };
        let batch = k.int("locality", 1, u64::from(MAX_BATCH))?;
        let timeout = k.int("locality_timeout_ms", 1, 3_600_000)?;
        let double = k.flag("locality_double", false)?;
        let locality = match batch {
            Some(b) => {
                let batch = BatchSize::new(b as u32).map_err(|e| setting_error(&e))?;
                let timeout = Duration::from_millis(timeout.unwrap_or(50));
                Some(LocalityConfig { batch, timeout, double_buffer: double })
            }
            // Given at their defaults they change nothing (the stubs show them so).
            None if timeout.is_some_and(|t| t != 50) || double => {
                return Err(bad_option("locality_timeout_ms/locality_double", "they tune locality buffering: give locality=B too"))
            }
            None => None,
        };
        let live = live_options(k)?;
        if let (Some(t), SourceSpec::File { .. }) = (live.timestamps, &spec) {
            return Err(bad_option("timestamps", format!("{t}: {source} is a trace, whose packets keep the times it holds")));
        }
        Ok(EngineOptions { spec, filter, filter_engine, packets, duration, pacing, pool, trace_access, cpus, balance, locality, live })
    }

    /// A trace file read at top speed (not paced, not live).
    pub fn top_speed_trace(&self) -> bool {
        matches!(self.spec, SourceSpec::File { .. }) && self.pacing == Pacing::TopSpeed
    }

    /// What runs filters in user space (the stream classes' too).
    pub fn filter_engine(&self) -> weir::filter::FilterEngine {
        self.filter_engine
    }

    /// The time limit (`duration=`), which a pull reader's caller enforces.
    pub fn duration(&self) -> Option<Duration> {
        self.duration
    }

    /// The builder of these options, for an application that allocates `app`
    /// beside the engine, with the kernel cutoff's flow map of `kernel_flows`
    /// entries on a live source (0: none; none either with a filter, as the
    /// CLI does).
    pub fn builder(&self, app: weir::memory::Plan, kernel_flows: u32) -> EngineBuilder {
        let kernel_flows = if self.filter.is_some() { 0 } else { kernel_flows };
        let mut b = Engine::builder()
            .application_memory(app)
            .source_spec(self.spec.clone())
            .pacing(self.pacing)
            .balance(self.balance)
            .locality(self.locality)
            .live(LiveOptions { kernel_flows, ..self.live.clone() })
            .trace_access(self.trace_access);
        if let Some(p) = self.pool {
            b = b.pool(p);
        }
        if let Some(c) = &self.cpus {
            b = b.cpus(c.clone());
        }
        if let Some(f) = &self.filter {
            b = b.filter(f.clone()).filter_engine(self.filter_engine);
        }
        if let Some(n) = self.packets {
            b = b.packet_limit(n);
        }
        if let Some(d) = self.duration {
            b = b.time_limit(d);
        }
        b
    }

    /// Builds the engine with the GIL released (opening a live source takes
    /// system calls), and says its notes as `weir.Notice` warnings. The build
    /// runs on a thread of its own while this one looks for signals every
    /// [`TICK`](crate::run::TICK): it may wait for the header of a trace from a
    /// pipe, and Ctrl-C (`KeyboardInterrupt`) stops that wait, as `duration=` does.
    pub fn build(&self, py: Python<'_>, app: weir::memory::Plan, kernel_flows: u32) -> PyResult<Engine> {
        let b = self.builder(app, kernel_flows);
        let stop = b.stop_handle();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let builder = std::thread::Builder::new()
            .name("weir-build".into())
            // The receiver is gone only once this call returned with an error of its own.
            .spawn(move || drop(tx.send(b.build())))
            .map_err(|e| crate::errors::Error::new_err(format!("starting the thread that opens the source: {e}")))?;
        let mut rx = rx;
        let built = loop {
            // The receiver goes to the detached closure and back: it is Send, not Sync.
            let (got, back) = py.detach(move || (rx.recv_timeout(crate::run::TICK), rx));
            rx = back;
            match got {
                Ok(built) => break built,
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(e) = py.check_signals() {
                        stop.stop();
                        // The stop ends a wait for a header at once; any other build is short.
                        py.detach(|| drop(builder.join()));
                        return Err(e);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(crate::errors::Error::new_err("opening the source failed: its thread ended without a result"))
                }
            }
        };
        py.detach(|| drop(builder.join()));
        let engine = built.map_err(build_error)?;
        crate::errors::notes(py, &engine.info().notes)?;
        Ok(engine)
    }
}

/// The options of live interfaces, with the CLI's defaults and ranges.
fn live_options(k: &Kwargs<'_>) -> PyResult<LiveOptions> {
    let d = LiveOptions::default();
    let fanout: Fanout = match k.string("fanout")? {
        Some(s) => s.parse().map_err(|e| setting_error(&e))?,
        None => d.afpacket.fanout,
    };
    let zero_copy = match k.string("zero_copy")?.as_deref() {
        None | Some("auto") => ZeroCopy::Auto,
        Some("on") => ZeroCopy::On,
        Some("off") => ZeroCopy::Off,
        Some(z) => return Err(bad_option("zero_copy", format!("{z:?}: expected \"auto\", \"on\" or \"off\""))),
    };
    let timestamps = match k.string("timestamps")? {
        Some(s) => Some(s.parse().map_err(|e| bad_option("timestamps", e))?),
        None => None,
    };
    let ms = |key, default: Duration| -> PyResult<Duration> { Ok(k.int(key, 1, 3_600_000)?.map_or(default, Duration::from_millis)) };
    Ok(LiveOptions {
        snaplen: k.int("snaplen", 1, weir::MAX_CAPLEN as u64)?.map_or(d.snaplen, |n| n as u32),
        promisc: k.flag("promisc", d.promisc)?,
        netns: k.path("netns")?,
        afpacket: AfPacketOptions {
            block_bytes: k.int("block_kib", 4, 1 << 20)?.map_or(d.afpacket.block_bytes, |n| (n * 1024) as usize),
            block_count: k.int("blocks", 1, u64::from(u32::MAX))?.map_or(d.afpacket.block_count, |n| n as usize),
            block_timeout: ms("block_timeout_ms", d.afpacket.block_timeout)?,
            fanout,
            rollover: k.flag("rollover", d.afpacket.rollover)?,
        },
        afxdp: AfXdpOptions {
            frame_size: k.int("frame_size", 2048, 4096)?.map_or(d.afxdp.frame_size, |n| n as usize),
            ring_size: k.int("ring_size", 1, 1 << 24)?.map(|n| n as u32).or(d.afxdp.ring_size),
            zero_copy,
            need_wakeup: true,
            replace_foreign: k.flag("replace_xdp", false)?,
            take_host_traffic: k.flag("take_host_traffic", false)?,
        },
        xdp: XdpOptions {
            ring_bytes: k.int("xdp_ring_mib", 1, 2048)?.map(|m| m << 20),
            spread: match k.string("xdp_spread")? {
                Some(s) => s.parse().map_err(|e| setting_error(&e))?,
                None => d.xdp.spread,
            },
            replace_foreign: k.flag("replace_xdp", false)?,
            take_host_traffic: k.flag("take_host_traffic", false)?,
        },
        kernel_flows: 0,
        timestamps,
    })
}

/// The kernel cutoff's keywords, for the functions on the stream layer:
/// entries of its flow map (0: none) and packets before an install.
pub fn kernel_cutoff(k: &Kwargs<'_>) -> PyResult<(u32, u64)> {
    let on = k.flag("kernel_cutoff", true)?;
    let flows = k.int("kernel_flows", 1, 1 << 24)?.unwrap_or(65_536) as u32;
    let after = k.int("kernel_install_after", 1, 1 << 32)?.unwrap_or(weir::stream::KERNEL_INSTALL_AFTER);
    Ok((if on { flows } else { 0 }, after))
}
