//! `--metrics ADDR:PORT`, the option every command that runs the engine
//! shares: the address is bound as the options are read, before anything is
//! opened, and served from the moment the engine runs until the process exits
//! (the serving is `weir-metrics`'s).
//!
//! An output with counts of its own (the Kafka output) registers them with
//! [`also_serve`] when it starts; [`serve`] serves them after the command's
//! own, so a new output adds its metrics in its own module, whatever
//! command runs it.

use crate::exit::bad_input;
use clap::Args;
use std::sync::{Arc, Mutex, PoisonError};
use weir_metrics::{Families, Listener, Scrape};

/// The outputs' scrapes, process-wide (as a Prometheus client's default
/// registry is): a command starts its outputs before it serves.
static OUTPUTS: Mutex<Vec<Arc<dyn Scrape>>> = Mutex::new(Vec::new());

/// Serve `what` beside the command's metrics from the next [`serve`] on.
pub fn also_serve(what: impl Scrape) {
    OUTPUTS.lock().unwrap_or_else(PoisonError::into_inner).push(Arc::new(what));
}

/// The command's scrape, then each output's.
struct WithOutputs<S> {
    command: S,
    outputs: Vec<Arc<dyn Scrape>>,
}

impl<S: Scrape> Scrape for WithOutputs<S> {
    fn collect(&self, out: &mut Families) {
        self.command.collect(out);
        for o in &self.outputs {
            o.collect(out);
        }
    }
}

/// The help text's heading and option, shared by the commands.
#[derive(Args, Clone, Debug, Default)]
#[command(next_help_heading = "Metrics")]
pub struct MetricsArgs {
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics while the command runs, and after it until
    /// weir exits: per-queue packets received, delivered, filtered and dropped, bytes, pool chunks in
    /// use, locality batch sizes, stream-layer counters, the process's CPU time (the user guide's Metrics
    /// chapter lists them). Scrapes read the counters weir's threads publish anyway and never slow capture. E.g.
    /// `--metrics 127.0.0.1:9101` (then `curl -s 127.0.0.1:9101/metrics`; `:9101` is the same, loopback),
    /// `--metrics 0.0.0.0:9101` on every interface (the endpoint has no authentication and shows source names,
    /// paths and weir's version: only on a network you trust), `--metrics 127.0.0.1:0` for a free port, said on
    /// standard error. At most 32 connections; one that sends no request within 10 s is closed. A value that does not
    /// parse, a port in use or a port that needs a privilege is an error before capture starts.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<String>,
}

impl MetricsArgs {
    /// Bind the address, if one was given.
    pub fn bind(&self) -> anyhow::Result<Option<Listener>> {
        let Some(spec) = &self.metrics else { return Ok(None) };
        match weir_metrics::listen(spec) {
            Ok(l) => Ok(Some(l)),
            Err(e) if e.is_bad_input() => Err(bad_input(anyhow::anyhow!("--metrics {e}"))),
            Err(e) => Err(anyhow::anyhow!("--metrics {e}")),
        }
    }
}

/// Start answering scrapes of `what` on `listener`, and say where.
pub fn serve(listener: Option<Listener>, what: impl Scrape) -> anyhow::Result<()> {
    let Some(l) = listener else { return Ok(()) };
    let url = l.url();
    let outputs = OUTPUTS.lock().unwrap_or_else(PoisonError::into_inner).clone();
    l.serve(Arc::new(WithOutputs { command: what, outputs })).map_err(|e| anyhow::anyhow!("--metrics {url}: cannot start serving: {e}"))?;
    eprintln!("weir: metrics at {url}");
    Ok(())
}
