//! Reading a whole trace file sequentially, for tools and tests.
//!
//! [`for_each_packet`] is the reference caller of [`Walker`]: a buffer that is
//! compacted and grown on `Need`, refilled by `read()`, advanced by `consumed`.

use super::{FormatError, ReadError, Record, Step, TraceHeader, Walker};
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::Path;

/// Bytes read at a time; grows to the largest record when one needs more.
const READ_CHUNK: usize = 1024 * 1024;

/// Read a whole file sequentially and call `f` for every packet with the
/// header, the record and its captured bytes. Returns the header and the number
/// of packets, or the first error (with the packets before it already passed to `f`).
pub fn for_each_packet(path: &Path, mut f: impl FnMut(&TraceHeader, &Record, &[u8])) -> Result<(TraceHeader, u64), ReadError> {
    let io_error = |error| ReadError::Io { path: path.to_path_buf(), error };
    let format_error = |error: FormatError| ReadError::Format { path: path.to_path_buf(), error };
    let mut file = File::open(path).map_err(io_error)?;
    let mut buf = vec![0u8; READ_CHUNK];
    // Unconsumed bytes are buf[pos..end]; buf[0] is at file offset `base`.
    let (mut pos, mut end, mut base, mut eof) = (0usize, 0usize, 0u64, false);
    let mut walker = Walker::new();
    let mut packets = 0u64;
    loop {
        let unread = &buf[pos..end];
        match walker.next(unread, base + pos as u64, eof).map_err(format_error)? {
            Step::Packet(record) => {
                let header = walker.header().expect("the walker reports packets only after the header");
                f(header, &record, &unread[record.data.clone()]);
                packets += 1;
                pos += record.consumed;
            }
            Step::Header { consumed } | Step::Skip { consumed } => pos += consumed,
            Step::Need { need } => {
                buf.copy_within(pos..end, 0);
                base += pos as u64;
                end -= pos;
                pos = 0;
                if buf.len() < need {
                    buf.resize(need, 0);
                }
                while end < buf.len() && !eof {
                    match file.read(&mut buf[end..]) {
                        Ok(0) => eof = true,
                        Ok(n) => end += n,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => return Err(io_error(e)),
                    }
                }
            }
            Step::End => {
                let header = walker.header().cloned().expect("the walker ends only after the header");
                return Ok((header, packets));
            }
        }
    }
}
