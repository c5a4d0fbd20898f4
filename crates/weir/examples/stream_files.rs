//! Writes each stream of a trace to a file of its own, as the stream layer
//! delivers it: `stream_files TRACE DIR [CUTOFF]`. A gap is left as a hole
//! (zeros); the file of a stream past its cutoff stops there. At the end it
//! prints the stream layer's counts.
//!
//! ```text
//! cargo run --release --example stream_files -- trace.pcap@0-1 /tmp/streams 65536
//! ```

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use weir::stream::{Piece, Stream, StreamConfig, StreamCtl, StreamHandler, StreamStats};
use weir::Engine;

struct Files {
    dir: PathBuf,
    errors: u64,
}

impl StreamHandler for Files {
    /// The stream's file, opened at its first piece.
    type State = Option<File>;

    fn created(&mut self, _: &mut StreamCtl<'_>) -> Option<File> {
        None
    }

    fn data(&mut self, ctl: &mut StreamCtl<'_>, file: &mut Option<File>, piece: &Piece<'_>) {
        if file.is_none() {
            let s = ctl.stream();
            let name = format!("{}-{}.{}-{}.{}-{}", s.proto, s.src, s.sport, s.dst, s.dport, s.first_ns);
            *file = File::create(self.dir.join(name)).ok();
        }
        match file {
            Some(f) if f.write_all_at(piece.data, piece.offset).is_ok() => {}
            _ => self.errors += 1,
        }
    }

    fn closed(&mut self, _: &Stream, _: Option<File>) {}
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, trace, dir, rest @ ..] = args.as_slice() else {
        return Err("usage: stream_files TRACE DIR [CUTOFF]".into());
    };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir)?;
    let cfg = StreamConfig { cutoff: rest.first().map(|c| c.parse()).transpose()?, ..StreamConfig::default() };
    let engine = Engine::builder().source(trace)?.application_memory(cfg.memory_plan(1)).build()?;
    let report = engine.run_streams(&cfg, |_| Files { dir: dir.clone(), errors: 0 })?;
    let mut total = StreamStats::default();
    let mut errors = 0;
    for (_, layer) in &report.handlers {
        total.add(&layer.stats());
        errors += layer.handler().errors;
    }
    println!(
        "{} streams, {} bytes delivered, {} gap, {} discarded past the cutoff, {} write errors",
        total.streams, total.delivered, total.gap, total.discarded, errors
    );
    Ok(())
}
