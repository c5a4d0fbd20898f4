//! `[streams]` and `[inspect]`: per queue one reassembling stream layer,
//! whose data goes to tcpflow-style files (`weir streams`' writer) and to
//! the rules' matcher (each match an `alert` event), and whose closed
//! streams go out as `stream` events. The two tables share the layer, so
//! its settings are `[streams]`' (the check makes sure of it).

use super::{End, Env, Output, Queue, Type};
use crate::events::Events;
use crate::inspect::Matcher;
use crate::streams::{packet_line, Writer};
use anyhow::anyhow;
use std::any::Any;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use weir::engine::StopHandle;
use weir::output::tee::Branch;
use weir::stream::{Piece, Stream, StreamConfig, StreamCtl, StreamHandler, StreamStats, Streams};
use weir::LinkType;

pub const TYPE: Type = Type {
    name: "streams",
    present: |cfg| cfg.streams.is_some() || cfg.inspect.is_some(),
    filter: |cfg| {
        cfg.streams.as_ref().and_then(|r| r.src.filter.clone()).or_else(|| cfg.inspect.as_ref().and_then(|r| r.src.filter.clone()))
    },
    open: |cfg, env| {
        let layer = env.stream_cfg.cloned().expect("the check makes the layer's settings for [streams] or [inspect]");
        layer.check().map_err(|e| crate::exit::setting_error(&e))?;
        let rules = env.matcher.cloned().map(|m| Arc::new(Rules { matcher: Mutex::new(m), generation: AtomicU64::new(0) }));
        Ok(Box::new(StreamsOutput {
            layer,
            files: cfg.streams.as_ref().map(|s| s.output.clone().map(Arc::new)),
            rules,
            events: env.events.cloned(),
            stream_events: (env.wants)("stream"),
        }))
    },
};

struct StreamsOutput {
    layer: StreamConfig,
    /// With `[streams]`: the directory of its files, if it writes any.
    files: Option<Option<Arc<PathBuf>>>,
    /// With `[inspect]`: the rules in force.
    rules: Option<Arc<Rules>>,
    events: Option<Events>,
    /// Closed streams go out as events.
    stream_events: bool,
}

/// The layer's consumers: files, the rules, events.
type StreamBranch = (Option<Writer>, (Option<AlertMatcher>, Option<StreamEvents>));

impl Output for StreamsOutput {
    fn branch(&self, queue: &mut Queue<'_>) -> anyhow::Result<Box<dyn Branch>> {
        let ethernet = queue.info.link_type == LinkType::ETHERNET;
        let writer = self.files.as_ref().map(|dir| Writer::new(dir.clone(), ethernet, false, None));
        let alerts = self.rules.as_ref().zip(self.events.as_ref()).map(|(r, ev)| AlertMatcher {
            rules: Arc::clone(r),
            matcher: r.matcher.lock().unwrap_or_else(PoisonError::into_inner).clone(),
            generation: r.generation.load(Ordering::Acquire),
            events: ev.clone(),
            alerts: 0,
        });
        let stream_events = self.events.as_ref().filter(|_| self.stream_events).map(|ev| StreamEvents(ev.clone()));
        let h: StreamBranch = (writer, (alerts, stream_events));
        let mut layer =
            Streams::new(&self.layer, queue.info.link_type, queue.id, queue.of, h).map_err(|e| crate::exit::setting_error(&e))?;
        if let Some(k) = queue.kernel.take() {
            layer.set_kernel_cutoff(k);
        }
        Ok(Box::new(layer))
    }

    /// The directory is made as the user the sensor runs as, so its files
    /// can be written and rotated away by that user.
    fn start(&mut self, _: &StopHandle, _: &Env<'_>) -> anyhow::Result<()> {
        if let Some(Some(dir)) = &self.files {
            std::fs::create_dir_all(dir.as_path())
                .map_err(|e| crate::exit::bad_input(anyhow!("[streams] output {}: cannot make the directory: {e}", dir.display())))?;
        }
        Ok(())
    }

    fn reload(&self, new: &crate::sensor::config::Config) -> anyhow::Result<super::Commit> {
        let (Some(rules), Some(i)) = (&self.rules, &new.inspect) else { return Ok(Box::new(|| ())) };
        let (matcher, _, _) = crate::inspect::stream_matcher(i)?;
        let rules = Arc::clone(rules);
        Ok(Box::new(move || {
            *rules.matcher.lock().unwrap_or_else(PoisonError::into_inner) = matcher;
            // Release: the workers that see the new generation find the new matcher.
            rules.generation.fetch_add(1, Ordering::Release);
        }))
    }

    fn finish(self: Box<Self>, branches: Vec<Box<dyn Any + Send>>, end: &End<'_>) -> anyhow::Result<bool> {
        let mut layer = StreamStats::default();
        let (mut files, mut write_errors, mut first_error, mut alerts) = (0, 0, None, 0);
        for b in branches {
            let l = b.downcast::<Streams<StreamBranch>>().map_err(|_| anyhow!("the streams branch is a stream layer"))?;
            layer.add(&l.stats());
            let (w, (a, _)) = l.into_handler();
            if let Some(w) = w {
                files += w.files;
                write_errors += w.write_errors;
                first_error = first_error.or(w.first_error);
            }
            alerts += a.map_or(0, |a| a.alerts);
        }
        (end.say)(format!(
            "[streams] {} packets ({} filtered out): {} streams in {} connections, {} bytes delivered, {} files, {} alerts",
            end.passed, end.filtered, layer.streams, layer.connections, layer.delivered, files, alerts
        ));
        (end.say)(format!("[streams] {}", packet_line(&layer)));
        if let Some(e) = &first_error {
            (end.say)(format!("[streams] {write_errors} write error(s), the first: {e}"));
        }
        Ok(first_error.is_none())
    }
}

/// The rules currently in force, replaced by a reload.
struct Rules {
    matcher: Mutex<Arc<Matcher>>,
    generation: AtomicU64,
}

/// One queue's matcher of stream data: each match is an `alert` event.
struct AlertMatcher {
    rules: Arc<Rules>,
    matcher: Arc<Matcher>,
    generation: u64,
    events: Events,
    alerts: u64,
}

impl StreamHandler for AlertMatcher {
    /// The service port whose rules the stream is matched with; `None`: not TCP or UDP.
    type State = Option<u16>;

    fn created(&mut self, ctl: &mut StreamCtl<'_>) -> Option<u16> {
        let s = ctl.stream();
        matches!(s.proto, 6 | 17).then(|| s.sport.min(s.dport))
    }

    fn data(&mut self, ctl: &mut StreamCtl<'_>, port: &mut Option<u16>, piece: &Piece<'_>) {
        let Some(port) = *port else { return };
        // Acquire: pairs with the reload's Release, after the matcher was stored.
        let g = self.rules.generation.load(Ordering::Acquire);
        if g != self.generation {
            self.matcher = self.rules.matcher.lock().unwrap_or_else(PoisonError::into_inner).clone();
            self.generation = g;
        }
        let s = ctl.stream();
        let (events, alerts) = (&self.events, &mut self.alerts);
        self.matcher.each_match(port, piece.data, |rule, m| {
            // Ends in the bytes repeated from the previous piece: reported with it.
            if m.end() <= piece.overlap {
                return;
            }
            *alerts += 1;
            events.alert(s, rule, piece.offset + m.start() as u64);
        });
    }

    fn closed(&mut self, _: &Stream, _: Option<u16>) {}
}

/// Closed streams as `stream` events.
struct StreamEvents(Events);

impl StreamHandler for StreamEvents {
    type State = ();
    fn created(&mut self, _: &mut StreamCtl<'_>) {}
    fn data(&mut self, _: &mut StreamCtl<'_>, _: &mut (), _: &Piece<'_>) {}
    fn closed(&mut self, s: &Stream, _: ()) {
        self.0.stream(s);
    }
}
