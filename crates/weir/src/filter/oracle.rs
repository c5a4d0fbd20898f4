//! The system libpcap as an oracle: traces read with `pcap_open_offline` and
//! `pcap_next_ex`, packets judged with `pcap_offline_filter`. Tests, fuzzing
//! and benchmarks hold weir's trace reader and filter interpreter to its
//! answers; weir itself never reads a packet through libpcap, so this is
//! built only with the `oracle` feature (and for weir's own tests).
//!
//! The functions come from the one load of the library ([`Libpcap`]).

#![allow(unsafe_code)]

use super::libpcap::{BpfInsn, BpfProgram, Libpcap, LoadError, PcapPkthdr, PcapT, ERRBUF_SIZE};
use std::ffi::{c_char, c_int, c_uint, CStr, CString};
use std::path::Path;
use std::sync::OnceLock;

type OpenOfflinePrec = unsafe extern "C" fn(*const c_char, c_uint, *mut c_char) -> *mut PcapT;
type NextEx = unsafe extern "C" fn(*mut PcapT, *mut *mut PcapPkthdr, *mut *const u8) -> c_int;
type OfflineFilter = unsafe extern "C" fn(*const BpfProgram, *const PcapPkthdr, *const u8) -> c_int;
type Datalink = unsafe extern "C" fn(*mut PcapT) -> c_int;
type Geterr = unsafe extern "C" fn(*mut PcapT) -> *mut c_char;
type Close = unsafe extern "C" fn(*mut PcapT);

/// `PCAP_TSTAMP_PRECISION_NANO`.
const TSTAMP_PRECISION_NANO: c_uint = 1;

/// The functions the oracle takes from the system libpcap.
pub struct Oracle {
    open_offline_prec: OpenOfflinePrec,
    next_ex: NextEx,
    offline_filter: OfflineFilter,
    datalink: Datalink,
    geterr: Geterr,
    close: Close,
}

static ORACLE: OnceLock<Result<Oracle, LoadError>> = OnceLock::new();

impl Oracle {
    /// The process-wide instance, looked up on first use.
    ///
    /// # Errors
    ///
    /// The system libpcap could not be loaded or lacks one of the functions.
    pub fn system() -> Result<&'static Oracle, LoadError> {
        ORACLE.get_or_init(Self::load).as_ref().map_err(Clone::clone)
    }

    fn load() -> Result<Oracle, LoadError> {
        let lib = Libpcap::system()?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the type given matches the libpcap 1.x prototype of $name.
                unsafe { lib.required($name) }?
            };
        }
        Ok(Oracle {
            open_offline_prec: sym!("pcap_open_offline_with_tstamp_precision"),
            next_ex: sym!("pcap_next_ex"),
            offline_filter: sym!("pcap_offline_filter"),
            datalink: sym!("pcap_datalink"),
            geterr: sym!("pcap_geterr"),
            close: sym!("pcap_close"),
        })
    }

    /// Open a trace with libpcap, at nanosecond precision.
    ///
    /// # Errors
    ///
    /// [`OpenOfflineError::Refused`] with libpcap's message,
    /// [`OpenOfflineError::NulByte`] if the path contains a NUL byte.
    pub fn open_offline(&self, path: &Path) -> Result<OfflineHandle<'_>, OpenOfflineError> {
        let c_path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| OpenOfflineError::NulByte)?;
        let mut errbuf = [0 as c_char; ERRBUF_SIZE];
        // SAFETY: `c_path` is NUL-terminated, `errbuf` has PCAP_ERRBUF_SIZE bytes.
        let p = unsafe { (self.open_offline_prec)(c_path.as_ptr(), TSTAMP_PRECISION_NANO, errbuf.as_mut_ptr()) };
        if p.is_null() {
            // SAFETY: on failure libpcap wrote a NUL-terminated message into errbuf.
            return Err(OpenOfflineError::Refused { message: unsafe { CStr::from_ptr(errbuf.as_ptr()) }.to_string_lossy().into_owned() });
        }
        Ok(OfflineHandle { oracle: self, p })
    }

    /// Whether `pcap_offline_filter` passes the packet, with a program compiled
    /// by [`Libpcap::compile`]: `data` are the captured bytes, `wire_len` the
    /// length on the wire.
    pub fn offline_filter(&self, prog: &[BpfInsn], data: &[u8], wire_len: u32) -> bool {
        let bp = BpfProgram { bf_len: prog.len() as c_uint, bf_insns: prog.as_ptr() as *mut BpfInsn };
        let hdr = PcapPkthdr { tv_sec: 0, tv_usec: 0, caplen: data.len() as u32, len: wire_len };
        // SAFETY: `bp` points at `prog` for the duration of the call and libpcap only
        // reads it; `data` holds `caplen` bytes.
        unsafe { (self.offline_filter)(&bp, &hdr, data.as_ptr()) != 0 }
    }
}

/// Why [`Oracle::open_offline`] opened no trace.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpenOfflineError {
    /// The path has a NUL byte, which C strings cannot carry.
    #[error("path contains NUL")]
    NulByte,
    /// libpcap refused the file; the message is libpcap's own, unchanged (it
    /// names the file).
    #[error("{message}")]
    Refused {
        /// libpcap's error buffer.
        message: String,
    },
}

/// Why [`OfflineHandle::next_packet`] read no packet: libpcap's message,
/// unchanged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct NextPacketError {
    /// `pcap_geterr`'s text.
    pub message: String,
}

/// A trace opened by the system libpcap.
pub struct OfflineHandle<'o> {
    oracle: &'o Oracle,
    p: *mut PcapT,
}

/// One packet as libpcap returned it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OraclePacket {
    /// Nanoseconds since the Unix epoch: the header's seconds × 10⁹ plus its
    /// nanoseconds, wrapping in 64 bits.
    pub ts_ns: u64,
    /// Bytes on the wire.
    pub wire_len: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
}

impl OfflineHandle<'_> {
    /// The trace's link type as libpcap reports it (`pcap_datalink`: a DLT_ value).
    pub fn link_type(&self) -> u32 {
        // SAFETY: `p` is live until drop.
        unsafe { (self.oracle.datalink)(self.p) as u32 }
    }

    /// The next packet, `Ok(None)` at the end, or libpcap's error message.
    pub fn next_packet(&mut self) -> Result<Option<OraclePacket>, NextPacketError> {
        let mut hdr: *mut PcapPkthdr = std::ptr::null_mut();
        let mut data: *const u8 = std::ptr::null();
        // SAFETY: `p` is live; the out-pointers are valid.
        let rc = unsafe { (self.oracle.next_ex)(self.p, &mut hdr, &mut data) };
        match rc {
            1 => {
                // SAFETY: on success libpcap points `hdr` at a header and `data` at caplen bytes,
                // valid until the next call; we copy them out at once.
                let h = unsafe { *hdr };
                // SAFETY: as above.
                let bytes = unsafe { std::slice::from_raw_parts(data, h.caplen as usize) }.to_vec();
                // Opened with nanosecond precision, so tv_usec holds nanoseconds.
                let ts_ns = (h.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(h.tv_usec as u64);
                Ok(Some(OraclePacket { ts_ns, wire_len: h.len, data: bytes }))
            }
            -2 => Ok(None),
            // SAFETY: pcap_geterr returns the handle's NUL-terminated message.
            _ => Err(NextPacketError { message: unsafe { CStr::from_ptr((self.oracle.geterr)(self.p)) }.to_string_lossy().into_owned() }),
        }
    }
}

impl Drop for OfflineHandle<'_> {
    fn drop(&mut self) {
        // SAFETY: `p` came from pcap_open_offline and is closed once.
        unsafe { (self.oracle.close)(self.p) };
    }
}

// The raw pointer is only used through `&mut self`, one thread at a time.
// SAFETY: a pcap_t may be moved between threads as long as it is not shared.
unsafe impl Send for OfflineHandle<'_> {}
