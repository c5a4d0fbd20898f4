//! weir's trace reader against the system libpcap, on real files.
//!
//! Every trace in `../shared/corpus/zeek-traces` and `tcpdump-4.99.3` must give
//! what libpcap gives: the same files refused at open, the same packets (time,
//! wire length, bytes) in the same order, and an error where libpcap stops with
//! one. Every file must give the same however its bytes are split between
//! calls (`malformed/` in steps as small as one byte), and never panic.

mod support;

use std::path::Path;
use support::{corpus_root, files_under, libpcap_trace, looks_like_trace, walk, walk_whole, SplitMix, Trace};
use weir::filter::oracle::Oracle;
use weir::tracefile::{for_each_packet, FormatErrorKind, ReadError};

#[derive(Default)]
struct Tally {
    files: usize,
    refused: usize,
    stopped: usize,
    packets: usize,
    caplen: u64,
    wire_len: u64,
    failures: Vec<String>,
}

impl Tally {
    fn add(&mut self, trace: &Trace) {
        self.files += 1;
        self.refused += usize::from(trace.open.is_err());
        self.stopped += usize::from(trace.end.is_err());
        self.packets += trace.packets.len();
        self.caplen += trace.packets.iter().map(|p| p.data.len() as u64).sum::<u64>();
        self.wire_len += trace.packets.iter().map(|p| u64::from(p.wire_len)).sum::<u64>();
    }

    fn finish(self, what: &str) {
        println!(
            "{what}: {} files checked ({} refused at open, {} stopped by an error), {} packets, {} captured bytes, {} wire bytes",
            self.files, self.refused, self.stopped, self.packets, self.caplen, self.wire_len
        );
        assert!(
            self.failures.is_empty(),
            "{} differences from libpcap in {} files:\n{}",
            self.failures.len(),
            self.files,
            self.failures.join("\n")
        );
        assert!(self.files > 0, "no trace found");
    }
}

fn libpcap() -> &'static Oracle {
    Oracle::system().unwrap_or_else(|e| panic!("the oracle is missing: {e}"))
}

/// Compare one file with libpcap, whole and then fed in steps of random sizes
/// up to each of `max_steps`; skip it if it is no trace to anyone.
fn check_file(root: &Path, path: &Path, max_steps: &[u64], rng: &mut SplitMix, tally: &mut Tally) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let expected = libpcap_trace(libpcap(), path);
    let walked = walk_whole(&bytes);
    if expected.open.is_err() && walked.trace.open.is_err() && !looks_like_trace(path, &bytes) {
        return;
    }
    let name = path.strip_prefix(root).unwrap_or(path).display();
    if let Some(diff) = expected.difference(&walked.trace) {
        tally.failures.push(format!("{name}: libpcap vs weir: {diff}"));
    }
    if bytes.starts_with(&[0x1F, 0x8B]) && !matches!(walked.error.as_ref().map(|e| &e.kind), Some(FormatErrorKind::Gzip)) {
        tally.failures.push(format!("{name}: gzip file not reported as such: {:?}", walked.error));
    }
    // The file-reading convenience must agree with the walker it wraps.
    let mut count = 0usize;
    let read = for_each_packet(path, |_, _, _| count += 1);
    match (&read, &walked.error) {
        (Ok((_, n)), None) if *n as usize == walked.trace.packets.len() && count == walked.trace.packets.len() => {}
        (Err(ReadError::Format { error, .. }), Some(e)) if error == e && count == walked.trace.packets.len() => {}
        _ => tally.failures.push(format!("{name}: for_each_packet gave {read:?} after {count} packets, the walker {:?}", walked.error)),
    }
    for &max_step in max_steps {
        let chunked = walk(&bytes, |_, _| (rng.next() % max_step) as usize + 1);
        if let Some(diff) = walked.trace.difference(&chunked.trace) {
            tally.failures.push(format!("{name}: one buffer vs steps of up to {max_step} bytes: {diff}"));
        }
        if chunked.error != walked.error || chunked.header != walked.header {
            tally
                .failures
                .push(format!("{name}: steps of up to {max_step} bytes end in {:?}, one buffer in {:?}", chunked.error, walked.error));
        }
    }
    tally.add(&expected);
}

#[test]
#[ignore = "needs the corpus in ../shared/corpus"]
fn corpus_traces_match_libpcap() {
    let root = corpus_root();
    let mut tally = Tally::default();
    let mut rng = SplitMix(0xC0DE);
    for dir in ["zeek-traces", "tcpdump-4.99.3"] {
        for path in files_under(&root.join(dir)) {
            check_file(&root, &path, &[65_536], &mut rng, &mut tally);
        }
    }
    tally.finish("zeek-traces and tcpdump-4.99.3");
}

#[test]
#[ignore = "needs the corpus in ../shared/corpus"]
fn malformed_files_match_libpcap_in_any_chunking() {
    let root = corpus_root();
    let mut tally = Tally::default();
    let mut rng = SplitMix(0x5EED);
    for path in files_under(&root.join("malformed")) {
        check_file(&root, &path, &[1, 3, 17, 64], &mut rng, &mut tally);
    }
    tally.finish("malformed");
}
