//! Configuration by environment, read when a handle is opened or created, so
//! an unmodified program gets weir's options. Every variable is optional; a
//! bad value makes the open fail with a message naming the variable.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `WEIR_LOCALITY=B` | locality buffering with batches of B packets (`0` or `off`: none) | off |
//! | `WEIR_LOCALITY_TIMEOUT_MS=T` | longest a packet waits for its batch | 50 |
//! | `WEIR_SOURCE=afpacket\|afxdp\|xdp` | how live interfaces are captured (xdp: weir's XDP program copies packets into one packed ring buffer, sized by `pcap_set_buffer_size`) | afpacket |
//! | `WEIR_TAKE_HOST_TRAFFIC=1` | with `WEIR_SOURCE=afxdp`, capture an interface that has an IP address, whose captured packets AF_XDP then takes from the host's stack (what the filter rejects stays); with `xdp`, drop what was copied so the host's stack spends nothing on it | refused (xdp: passed on) |
//! | `WEIR_QUEUES=A-B` | the RX queues of a live interface (`2`, `0-3`) | all |
//! | `WEIR_POOL=M,R` | pool per queue: R chunks of M cells | 256,128, raised to hold two batches |
//! | `WEIR_STATS_FILE=PATH` | at close, weir's per-queue counters as JSON lines | none |
//! | `WEIR_METRICS=ADDR:PORT` | serve the handles' counters as Prometheus metrics at http://ADDR:PORT/metrics (`metrics.rs`) | none |
//! | `WEIR_PROFILE_FILE=PATH` | profile the program (`weir profile -- run`): the engines' and the reading threads' stages, written to PATH as JSON at exit (see `profile.rs`) | none |
//! | `WEIR_PROFILE_EVERY=N` | with `WEIR_PROFILE_FILE`: time one window in N | weir's default, 32 |
//! | `WEIR_FILTER_ENGINE=jit\|interp` | what runs `pcap_setfilter`'s program on the packets weir filters itself: compiled to machine code, or interpreted | jit |

use crate::profile::ProfileRequest;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use weir::filter::FilterEngine;
use weir::locality::{BatchSize, LocalityConfig};
use weir::source::{LiveKind, QueueRange, SourceSpec};
use weir::stats::Snapshot;
use weir::{EngineBuilder, PoolConfig};

/// What the environment asked for.
#[derive(Clone, Debug)]
pub struct Settings {
    pub locality: Option<LocalityConfig>,
    pub source: LiveKind,
    pub queues: Option<QueueRange>,
    /// `WEIR_POOL`; without it the engine picks (and raises its default for
    /// locality buffering).
    pub pool: Option<PoolConfig>,
    /// Opened when the handle is, before a program like tcpdump gives up its
    /// privileges, so the counters can be written at close.
    pub stats_file: Option<(PathBuf, Arc<File>)>,
    pub filter_engine: FilterEngine,
    /// `WEIR_TAKE_HOST_TRAFFIC`: afxdp may capture an interface the host uses.
    pub take_host_traffic: bool,
    /// `WEIR_PROFILE_FILE` and `WEIR_PROFILE_EVERY`.
    pub profile: Option<ProfileRequest>,
    /// `WEIR_METRICS`: where the metrics are served.
    pub metrics: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            locality: None,
            source: LiveKind::AfPacket,
            queues: None,
            pool: None,
            stats_file: None,
            filter_engine: FilterEngine::default(),
            take_host_traffic: false,
            profile: None,
            metrics: None,
        }
    }
}

impl Settings {
    /// The settings of this process's environment. The first to ask for
    /// profiling starts it for the whole process (`profile.rs`), and the
    /// first to ask for metrics their server (`metrics.rs`).
    pub fn from_env() -> Result<Settings, String> {
        let s = Settings::from_vars(|name| std::env::var(name).ok())?;
        if let Some(req) = &s.profile {
            crate::profile::start(req)?;
        }
        if let Some(spec) = &s.metrics {
            crate::metrics::start(spec)?;
        }
        Ok(s)
    }

    /// The settings from variables looked up with `get`: the environment, or a
    /// test's own table.
    fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        let var = |name: &str| get(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let mut s = Settings::default();
        if let Some(v) = var("WEIR_LOCALITY").filter(|v| v != "0" && v != "off") {
            let n: u32 = v.parse().map_err(|_| format!("WEIR_LOCALITY={v}: expected a batch size in packets, or 0 for off"))?;
            let mut cfg = LocalityConfig::new(BatchSize::new(n).map_err(|e| format!("WEIR_LOCALITY={v}: {}", e.problem))?);
            if let Some(t) = var("WEIR_LOCALITY_TIMEOUT_MS") {
                let ms: u64 = t.parse().map_err(|_| format!("WEIR_LOCALITY_TIMEOUT_MS={t}: expected milliseconds"))?;
                cfg.timeout = Duration::from_millis(ms.max(1));
            }
            s.locality = Some(cfg);
        }
        if let Some(v) = var("WEIR_SOURCE") {
            s.source = match v.as_str() {
                "afpacket" => LiveKind::AfPacket,
                "afxdp" => LiveKind::AfXdp,
                "xdp" => LiveKind::Xdp,
                _ => return Err(format!("WEIR_SOURCE={v}: expected afpacket, afxdp or xdp")),
            };
        }
        if let Some(v) = var("WEIR_TAKE_HOST_TRAFFIC") {
            s.take_host_traffic = match v.as_str() {
                "1" | "yes" => true,
                "0" | "no" => false,
                _ => return Err(format!("WEIR_TAKE_HOST_TRAFFIC={v}: expected 1 or 0")),
            };
        }
        if let Some(v) = var("WEIR_QUEUES") {
            s.queues = Some(v.parse().map_err(|e| format!("WEIR_QUEUES={v}: {e}"))?);
        }
        if let Some(v) = var("WEIR_POOL") {
            s.pool = Some(v.parse().map_err(|e| format!("WEIR_POOL={v}: {e}"))?);
        }
        if let Some(v) = var("WEIR_FILTER_ENGINE") {
            s.filter_engine = v.parse().map_err(|e| format!("WEIR_FILTER_ENGINE={v}: {e}"))?;
        }
        if let Some(v) = var("WEIR_PROFILE_FILE") {
            let every = match var("WEIR_PROFILE_EVERY") {
                Some(e) => e
                    .parse()
                    .ok()
                    .filter(|&n: &u32| n >= 1)
                    .ok_or_else(|| format!("WEIR_PROFILE_EVERY={e}: expected a whole number, at least 1"))?,
                None => weir::profile::DEFAULT_EVERY,
            };
            s.profile = Some(ProfileRequest { path: PathBuf::from(v), every });
        }
        if let Some(v) = var("WEIR_METRICS") {
            s.metrics = Some(v);
        }
        if let Some(v) = var("WEIR_STATS_FILE") {
            let path = PathBuf::from(v);
            let f =
                OpenOptions::new().create(true).append(true).open(&path).map_err(|e| format!("WEIR_STATS_FILE={}: {e}", path.display()))?;
            s.stats_file = Some((path, Arc::new(f)));
        }
        Ok(s)
    }

    /// An engine builder for `spec` with these settings.
    pub fn builder(&self, spec: SourceSpec) -> EngineBuilder {
        let mut b = weir::Engine::builder().source_spec(spec).locality(self.locality);
        if let Some(p) = crate::profile::profiler() {
            b = b.profile(p);
        }
        match self.pool {
            Some(p) => b.pool(p),
            None => b,
        }
    }

    /// Append the counters to `WEIR_STATS_FILE`, one JSON line per queue and
    /// one for the total. Failing to write is said on stderr, once.
    /// The packets the engine received are also counted for the profile, if one is made.
    pub fn report(&self, stats: &Snapshot) {
        crate::profile::received(stats.total().received);
        let Some((path, file)) = &self.stats_file else { return };
        let mut out = String::new();
        let line = |q: &weir::stats::QueueStats, name: String| {
            let fields: String = q.fields().iter().map(|(k, v)| format!(",\"{k}\":{v}")).collect();
            format!("{{\"pid\":{},\"queue\":{name}{fields}}}\n", std::process::id())
        };
        for q in &stats.queues {
            out.push_str(&line(q, q.queue.0.to_string()));
        }
        out.push_str(&line(&stats.total(), "\"total\"".into()));
        // One write of the whole report to an O_APPEND file: reports of several
        // handles or processes do not interleave.
        let written = (&**file).write_all(out.as_bytes());
        if let Err(e) = written {
            eprintln!("weir: WEIR_STATS_FILE={}: {e}", path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<Settings, String> {
        Settings::from_vars(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn the_filter_engine_is_the_jit_unless_asked_otherwise() {
        assert_eq!(with(&[]).unwrap().filter_engine, FilterEngine::Jit);
        assert_eq!(with(&[("WEIR_FILTER_ENGINE", "interp")]).unwrap().filter_engine, FilterEngine::Interp);
        assert_eq!(with(&[("WEIR_FILTER_ENGINE", " jit ")]).unwrap().filter_engine, FilterEngine::Jit);
        assert_eq!(with(&[("WEIR_FILTER_ENGINE", "")]).unwrap().filter_engine, FilterEngine::Jit, "empty is unset");
        let err = with(&[("WEIR_FILTER_ENGINE", "bpf")]).unwrap_err();
        assert!(err.starts_with("WEIR_FILTER_ENGINE=bpf: ") && err.contains("jit or interp"), "{err}");
    }

    #[test]
    fn profiling_is_asked_for_with_a_file() {
        assert_eq!(with(&[("WEIR_PROFILE_EVERY", "4")]).unwrap().profile, None, "no file, no profile");
        let req = with(&[("WEIR_PROFILE_FILE", "/tmp/p.json")]).unwrap().profile.unwrap();
        assert_eq!(req, ProfileRequest { path: "/tmp/p.json".into(), every: weir::profile::DEFAULT_EVERY });
        let req = with(&[("WEIR_PROFILE_FILE", "/tmp/p.json"), ("WEIR_PROFILE_EVERY", "4")]).unwrap().profile.unwrap();
        assert_eq!(req.every, 4);
        for bad in ["0", "x", "-1"] {
            let err = with(&[("WEIR_PROFILE_FILE", "/tmp/p.json"), ("WEIR_PROFILE_EVERY", bad)]).unwrap_err();
            assert!(err.starts_with(&format!("WEIR_PROFILE_EVERY={bad}: ")), "{err}");
        }
    }
}
