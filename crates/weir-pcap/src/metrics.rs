//! `WEIR_METRICS=ADDR:PORT`: the program's captures as Prometheus metrics,
//! the same `weir --metrics` serves (`weir run --metrics` sets the variable).
//!
//! One server per process, bound by the first handle opened while the
//! variable is set (a bad value, a port in use or a refused privilege fails
//! that open, and every later one, with a message naming the variable); every
//! handle that reads packets is served from its first read on, and after its
//! close with its final counts, until the program exits. Each handle's
//! samples carry `handle="N"`, N counting handles in the order they started
//! reading, so several handles on one device stay apart. A program that
//! forks after opening its capture (a daemon) leaves the server in the parent:
//! run it in the foreground.

use std::sync::{Arc, Mutex, OnceLock};
use weir::engine::Watch;
use weir_metrics::{EngineMetrics, Families, Scrape};

/// The handles served, in the order they started reading.
#[derive(Default)]
struct Handles(Mutex<Vec<EngineMetrics>>);

impl Scrape for Handles {
    fn collect(&self, out: &mut Families) {
        // Taken by the scrape and by a handle's first read, never by a packet.
        let handles = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for h in handles.iter() {
            h.collect(out);
        }
    }
}

static SERVER: OnceLock<Result<Arc<Handles>, String>> = OnceLock::new();

/// Serve the metrics on `spec` (the value of `WEIR_METRICS`), binding it on
/// the first call; later calls say how the first went.
pub fn start(spec: &str) -> Result<(), String> {
    SERVER
        .get_or_init(|| {
            let refuse = |e: &dyn std::fmt::Display| format!("WEIR_METRICS={spec}: {e}");
            let listener = weir_metrics::listen(spec).map_err(|e| refuse(&e))?;
            let url = listener.url();
            let handles = Arc::new(Handles::default());
            listener.serve(Arc::clone(&handles) as Arc<dyn Scrape>).map_err(|e| refuse(&e))?;
            eprintln!("weir: metrics at {url}");
            Ok(handles)
        })
        .clone()
        .map(|_| ())
}

/// Serve a handle's counters, if the metrics are served.
pub fn serve(watch: Watch) {
    if let Some(Ok(handles)) = SERVER.get() {
        let mut list = handles.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = list.len().to_string();
        list.push(EngineMetrics::new(watch).with_label("handle", &n));
    }
}
