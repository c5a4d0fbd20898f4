//! `[flows]`: per queue a flows-mode stream layer (statistics only), whose
//! records go to `weir flows`' exporters ([`FlowOutput`]: collectors and
//! IPFIX files) and, as `flow` events, to `[events]` and `[kafka]`.

use super::{End, Env, Output, Type};
use crate::flows::{Exporting, FlowOutput, ToExporter};
use anyhow::anyhow;
use std::any::Any;
use weir::engine::{SourceInfo, StopHandle};
use weir::output::tee::Branch;
use weir::stream::{StreamConfig, StreamStats, Streams};
use weir::QueueId;

pub const TYPE: Type = Type {
    name: "flows",
    present: |cfg| cfg.flows.is_some(),
    filter: |cfg| cfg.flows.as_ref().and_then(|r| r.src.filter.clone()),
    open: |cfg, _, env| {
        let out = FlowOutput::open(cfg.flows.as_ref().expect("open is called for a present output"), &env.info.queues)?;
        Ok(Box::new(Flows { cfg: out.cfg.clone(), output: Some(out), exporting: None }))
    },
};

struct Flows {
    /// The flows-mode layer's settings.
    cfg: StreamConfig,
    /// Until [`Output::start`].
    output: Option<FlowOutput>,
    /// From [`Output::start`] on.
    exporting: Option<Exporting>,
}

impl Output for Flows {
    fn branch(&self, q: QueueId, queues: usize, info: &SourceInfo) -> anyhow::Result<Box<dyn Branch>> {
        let h = self.output.as_ref().expect("branches are made before the start").handler(q);
        let layer = Streams::new(&self.cfg, info.link_type, q, queues, h).map_err(|e| crate::exit::setting_error(&e))?;
        Ok(Box::new(layer))
    }

    fn start(&mut self, stop: &StopHandle, env: &Env<'_>) -> anyhow::Result<()> {
        let out = self.output.take().expect("started once");
        self.exporting = Some(out.start(stop, env.events.filter(|_| (env.wants)("flow")))?);
        Ok(())
    }

    fn finish(self: Box<Self>, branches: Vec<Box<dyn Any + Send>>, end: &End<'_>) -> anyhow::Result<bool> {
        let mut layer = StreamStats::default();
        let mut handlers = Vec::new();
        for b in branches {
            let l = b.downcast::<Streams<ToExporter>>().map_err(|_| anyhow!("the flows branch is a flows layer"))?;
            layer.add(&l.stats());
            handlers.push(l.into_handler());
        }
        let Some(x) = self.exporting else { return Ok(false) };
        let args = end.cfg.flows.as_ref().expect("finish is called for a present output");
        let s = x.finish(args, handlers, &layer, end.elapsed, end.events)?;
        (end.say)(format!("[flows] {} packets ({} filtered out): {}", end.passed, end.filtered, s.json));
        Ok(s.lost == 0 && !s.bounced && !s.file_error && s.adds_up)
    }
}
