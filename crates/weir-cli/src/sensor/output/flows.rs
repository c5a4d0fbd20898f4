//! `[flows]`: per queue a flows-mode stream layer (statistics only), whose
//! records go to `weir flows`' exporters ([`FlowOutput`]: collectors and
//! IPFIX files) and, as `flow` events, to `[events]` and `[kafka]`.

use super::{End, Env, Output, Queue, Type};
use crate::flows::{Exporting, FlowOutput, ToExporter};
use anyhow::anyhow;
use std::any::Any;
use weir::engine::StopHandle;
use weir::output::flow::NextFile;
use weir::output::tee::Branch;
use weir::stream::{StreamConfig, StreamStats, Streams};

pub const TYPE: Type = Type {
    name: "flows",
    present: |cfg| cfg.flows.is_some(),
    filter: |cfg| cfg.flows.as_ref().and_then(|r| r.src.filter.clone()),
    open: |cfg, env| {
        let out = FlowOutput::open(cfg.flows.as_ref().expect("open is called for a present output"), &env.info.queues)?;
        let layer = StreamConfig { kernel_install_after: cfg.capture.kernel.kernel_install_after, ..out.cfg.clone() };
        Ok(Box::new(Flows { cfg: layer, next_files: out.next_files(), output: Some(out), exporting: None }))
    },
};

struct Flows {
    /// The flows-mode layer's settings.
    cfg: StreamConfig,
    /// Until [`Output::start`].
    output: Option<FlowOutput>,
    /// From [`Output::start`] on.
    exporting: Option<Exporting>,
    /// One per exporter that writes files.
    next_files: Vec<NextFile>,
}

impl Output for Flows {
    fn branch(&self, queue: &mut Queue<'_>) -> anyhow::Result<Box<dyn Branch>> {
        let h = self.output.as_ref().expect("branches are made before the start").handler(queue.id);
        let mut layer = Streams::new(&self.cfg, queue.info.link_type, queue.id, queue.of, h).map_err(|e| crate::exit::setting_error(&e))?;
        if let Some(k) = queue.kernel.take() {
            layer.set_kernel_cutoff(k);
        }
        Ok(Box::new(layer))
    }

    fn start(&mut self, stop: &StopHandle, env: &Env<'_>) -> anyhow::Result<()> {
        let out = self.output.take().expect("started once");
        self.exporting = Some(out.start(stop, env.events.filter(|_| (env.wants)("flow")))?);
        Ok(())
    }

    fn next_file(&mut self) -> Option<String> {
        self.next_files.iter().for_each(NextFile::ask);
        (!self.next_files.is_empty())
            .then(|| "an open IPFIX file that holds a record is closed at the next message, which starts the next file".into())
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
        let s = x.finish(args, handlers, &layer, end.elapsed, end.events, &|m| (end.say)(format!("[flows] {m}")))?;
        (end.say)(format!("[flows] {} packets ({} filtered out): {}", end.passed, end.filtered, s.json));
        Ok(s.lost == 0 && !s.bounced && !s.file_error && s.adds_up)
    }
}
