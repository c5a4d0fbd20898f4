//! The sensor's `[metrics]`: the engine's metrics (weir-metrics'
//! [`EngineMetrics`]) and each output's counts, read from the counters the
//! outputs keep anyway, so a scrape never slows the capture (the record
//! output's count is read under its writer's lock, for a moment).

use super::output::Output;
use crate::events::{Events, TYPES};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use weir::output::tee::BranchCounts;
use weir::QueueId;
use weir_metrics::catalogue as c;
use weir_metrics::{EngineMetrics, Families, Scrape};

/// Reloads asked for, done and refused.
#[derive(Default)]
pub struct Reloads {
    pub done: AtomicU64,
    pub refused: AtomicU64,
}

/// One queue's outputs, each by name with its branch's counts.
pub type QueueBranches = (QueueId, Vec<(&'static str, Arc<BranchCounts>)>);

pub struct SensorMetrics {
    pub engine: EngineMetrics,
    pub sensor: String,
    /// Per queue, each output's name and its branch's counts.
    pub branches: Vec<QueueBranches>,
    /// The outputs, for their own families (taken away at the end).
    pub outputs: Arc<Mutex<Vec<Box<dyn Output>>>>,
    pub events: Option<Events>,
    pub reloads: Arc<Reloads>,
}

impl Scrape for SensorMetrics {
    fn collect(&self, out: &mut Families) {
        self.engine.collect(out);
        let sensor = self.sensor.as_str();
        for (q, outputs) in &self.branches {
            let queue = q.0.to_string();
            for (output, counts) in outputs {
                let (passed, filtered) = counts.get();
                for (result, n) in [("passed", passed), ("filtered", filtered)] {
                    let l = [("queue", queue.as_str()), ("sensor", sensor), ("output", output), ("result", result)];
                    out.counter(&c::SENSOR_OUTPUT_PACKETS, &l, n as f64);
                }
            }
        }
        let l = [("sensor", sensor)];
        for o in self.outputs.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            o.collect(sensor, out);
        }
        if let Some(ev) = self.events.as_ref().filter(|e| e.has_file()) {
            let (st, pending) = ev.counts();
            for (t, n) in TYPES.iter().zip(st.made) {
                out.counter(&c::SENSOR_EVENTS, &[("sensor", sensor), ("type", t)], n as f64);
            }
            out.counter(&c::SENSOR_EVENTS_WRITTEN, &l, st.written as f64);
            out.counter(&c::SENSOR_EVENTS_UNWRITTEN, &l, st.unwritten as f64);
            out.gauge(&c::SENSOR_EVENTS_PENDING, &l, pending as f64);
        }
        // Relaxed: counters the main loop bumps; a scrape wants a recent value.
        for (result, n) in [("done", &self.reloads.done), ("refused", &self.reloads.refused)] {
            out.counter(&c::SENSOR_RELOADS, &[("sensor", sensor), ("result", result)], n.load(Ordering::Relaxed) as f64);
        }
    }
}
