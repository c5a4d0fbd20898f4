//! `[record]`: every packet its filter passes into rotating pcap or pcapng
//! files, with `weir record`'s handler and writer: one writer for all the
//! queues, behind a lock taken once per run of packets, and the rolling
//! buffer's deletions said in the log.

use super::{End, Env, Output, Queue, Type};
use crate::record::{Recorder, Shared};
use anyhow::anyhow;
use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError};
use weir::engine::StopHandle;
use weir::output::tee::Branch;
use weir_metrics::catalogue as c;
use weir_metrics::Families;

pub const TYPE: Type = Type {
    name: "record",
    present: |cfg| cfg.record.is_some(),
    filter: |cfg| cfg.record.as_ref().and_then(|r| r.src.filter.clone()),
    open: |cfg, env| {
        let args = cfg.record.as_ref().expect("open is called for a present output");
        let writer = crate::record::writer(args, env.info)?;
        // On a live source packet time is the clock's: it ages the files on
        // through quiet periods (as weir record does).
        let wall_clock_ages = args.max_age.is_some() && env.info.iface.is_some();
        let shared = Arc::new(Mutex::new(Shared { writer: Some(writer), error: None, packets: 0 }));
        let deletes = args.budget.is_some() || args.max_age.is_some() || args.rotation.max_files.is_some();
        Ok(Box::new(Record { shared, wall_clock_ages, deletes, failure_said: false }))
    },
};

struct Record {
    shared: Arc<Mutex<Shared>>,
    wall_clock_ages: bool,
    /// A budget, an age or a count of files: the rolling buffer deletes.
    deletes: bool,
    failure_said: bool,
}

impl Record {
    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Output for Record {
    fn branch(&self, _: &mut Queue<'_>) -> anyhow::Result<Box<dyn Branch>> {
        Ok(Box::new(Recorder { shared: Arc::clone(&self.shared) }))
    }

    fn start(&mut self, _: &StopHandle, _: &Env<'_>) -> anyhow::Result<()> {
        let mut s = self.shared();
        s.writer.as_mut().expect("the writer is only taken at the end").prepare().map_err(|e| anyhow!("[record] write: {e}"))
    }

    fn tick(&mut self, say: &dyn Fn(String)) {
        let mut s = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if s.error.is_none() {
            if let Some(Err(e)) = s.writer.as_mut().map(weir::sink::rotate::RotatingWriter::flush) {
                s.error = Some(anyhow!(e));
            }
        }
        // A failed output is said when it fails, not months later.
        if let (Some(e), false) = (&s.error, self.failure_said) {
            say(format!("[record] error: {e:#}: no more packets are written; the capture and the other outputs go on"));
            self.failure_said = true;
        }
        let deletions = match s.writer.as_mut() {
            Some(w) => {
                if self.wall_clock_ages {
                    w.expire(crate::record::wall_clock_ns());
                }
                w.take_deletions()
            }
            None => Vec::new(),
        };
        // Said outside the lock the workers wait on.
        drop(s);
        crate::record::log_deletions(&deletions);
    }

    fn next_file(&mut self) -> Option<String> {
        let started = self.shared().writer.as_mut().is_some_and(weir::sink::rotate::RotatingWriter::start_next_file);
        Some(
            if started { "the next packet starts a new file" } else { "no packet file to close (none written yet, or not a regular file)" }
                .into(),
        )
    }

    fn counters(&self, o: &mut serde_json::Map<String, serde_json::Value>) {
        o.insert("written".into(), self.shared().packets.into());
    }

    fn collect(&self, sensor: &str, out: &mut Families) {
        out.counter(&c::SENSOR_RECORD_WRITTEN, &[("sensor", sensor)], self.shared().packets as f64);
    }

    fn finish(self: Box<Self>, _: Vec<Box<dyn Any + Send>>, end: &End<'_>) -> anyhow::Result<bool> {
        let mut s = self.shared();
        let done = s.writer.take().map(|mut w| {
            crate::record::log_deletions(&w.take_deletions());
            w.finish_with_deletions()
        });
        let (files, ok) = match (s.error.take(), done) {
            (None, Some(Ok(done))) => {
                crate::record::log_deletions(&done.deletions);
                if self.deletes {
                    (end.say)(format!("[record] {}", crate::record::deletion_summary(&done.totals)));
                }
                (done.files, true)
            }
            (e, f) => {
                let e = e.map(|e| format!("{e:#}")).or_else(|| f.and_then(Result::err).map(|e| e.to_string())).unwrap_or_default();
                (end.say)(format!("[record] error: {e}: {} packets not written", end.passed.saturating_sub(s.packets)));
                (Vec::new(), false)
            }
        };
        (end.say)(format!(
            "[record] {} packets ({} filtered out): {} written to {} file(s){}",
            end.passed,
            end.filtered,
            s.packets,
            files.len(),
            files.last().map_or(String::new(), |f| format!(", the last {}", f.display()))
        ));
        Ok(ok)
    }
}
