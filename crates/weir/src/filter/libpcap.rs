//! The system libpcap, loaded privately at run time.
//!
//! weir never writes a BPF compiler: filter expressions go to libpcap's own
//! `pcap_compile`. The library is opened by absolute path with `RTLD_LOCAL |
//! RTLD_DEEPBIND` rather than linked, for two reasons. weir's libpcap-compatible
//! library is itself called `libpcap.so.0.8` and sits first on `LD_LIBRARY_PATH`,
//! so a normal link would resolve to weir; and DEEPBIND makes the system library
//! bind its own internal calls to itself, not to the same-named symbols weir exports.
//!
//! Reading traces with the system libpcap, the oracle tests and fuzzing hold
//! weir's trace reader and filter interpreter to, is not here but in
//! `oracle.rs`, behind the `oracle` feature: it is no part of weir's work.
//!
//! Set `WEIR_SYSTEM_LIBPCAP` to the library's path to override the search.

#![allow(unsafe_code)]

pub use crate::sys::bpf::BpfInsn;
use std::ffi::{c_char, c_int, c_uint, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

include!("libpcap_paths.rs");

/// libpcap's `PCAP_ERRBUF_SIZE`: the bytes an error buffer passed to it must have.
pub const ERRBUF_SIZE: usize = 256;
/// `PCAP_NETMASK_UNKNOWN`.
const NETMASK_UNKNOWN: u32 = 0xffff_ffff;

/// `struct bpf_program`: a program as libpcap's C API passes it.
#[repr(C)]
pub struct BpfProgram {
    /// Number of instructions at `bf_insns`.
    pub bf_len: c_uint,
    /// The first instruction.
    pub bf_insns: *mut BpfInsn,
}

/// `struct pcap_pkthdr` on Linux (64-bit `timeval`).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub struct PcapPkthdr {
    /// Whole seconds of the timestamp since the Unix epoch.
    pub tv_sec: libc::time_t,
    /// The fraction: microseconds, or nanoseconds on a handle opened with
    /// nanosecond precision.
    pub tv_usec: libc::suseconds_t,
    /// Bytes captured.
    pub caplen: u32,
    /// Bytes on the wire.
    pub len: u32,
}

/// Opaque `pcap_t`.
#[repr(C)]
pub(super) struct PcapT {
    _opaque: [u8; 0],
}

/// The library could not be found or lacks a symbol.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// No libpcap in the usual places, and `WEIR_SYSTEM_LIBPCAP` is not set.
    #[error("system libpcap not found (looked in {searched}); install libpcap0.8 or set WEIR_SYSTEM_LIBPCAP")]
    NotFound {
        /// The paths tried, comma-separated.
        searched: String,
    },
    /// The dynamic loader refused the library.
    #[error("cannot load {path}: {message}")]
    Open {
        /// The library.
        path: PathBuf,
        /// The loader's message.
        message: String,
    },
    /// The library lacks a function weir needs.
    #[error("{path} has no symbol {symbol}")]
    Symbol {
        /// The library.
        path: PathBuf,
        /// The function's name.
        symbol: &'static str,
    },
}

/// Why [`Libpcap::compile`] gave no program.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompileError {
    /// The expression has a NUL byte, which C strings cannot carry.
    #[error("filter expression contains a NUL byte")]
    NulByte,
    /// libpcap could not make the handle to compile with (out of memory).
    #[error("pcap_open_dead failed (link type {link_type}, snaplen {snaplen})")]
    OpenDead {
        /// The DLT_ value asked for.
        link_type: u32,
        /// The snaplen asked for.
        snaplen: u32,
    },
    /// libpcap refused the expression; the message is libpcap's own, unchanged
    /// (it quotes the part of the expression at fault).
    #[error("{message}")]
    Refused {
        /// `pcap_geterr`'s text.
        message: String,
    },
}

type OpenDead = unsafe extern "C" fn(c_int, c_int) -> *mut PcapT;
type Compile = unsafe extern "C" fn(*mut PcapT, *mut BpfProgram, *const c_char, c_int, u32) -> c_int;
type Freecode = unsafe extern "C" fn(*mut BpfProgram);
type Geterr = unsafe extern "C" fn(*mut PcapT) -> *mut c_char;
type Close = unsafe extern "C" fn(*mut PcapT);
type LibVersion = unsafe extern "C" fn() -> *const c_char;

/// The functions weir takes from the system libpcap.
pub struct Libpcap {
    path: PathBuf,
    lib: libloading::Library,
    open_dead: OpenDead,
    compile: Compile,
    freecode: Freecode,
    geterr: Geterr,
    close: Close,
    lib_version: LibVersion,
}

static SYSTEM: OnceLock<Result<Libpcap, LoadError>> = OnceLock::new();

/// Function `name` of `lib`, or `None` if it lacks it.
///
/// # Safety
/// `F` is the function pointer type of `name`'s prototype.
unsafe fn lookup<F: Copy>(lib: &libloading::Library, name: &str) -> Option<F> {
    let mut z = name.as_bytes().to_vec();
    z.push(0);
    // SAFETY: as the caller promises.
    unsafe { lib.get::<F>(&z) }.ok().map(|s| *s)
}

/// Function `name` of `lib`, loaded from `path`; its absence is an error.
///
/// # Safety
/// As [`lookup`].
unsafe fn required<F: Copy>(lib: &libloading::Library, path: &Path, name: &'static str) -> Result<F, LoadError> {
    // SAFETY: as the caller promises.
    unsafe { lookup(lib, name) }.ok_or_else(|| LoadError::Symbol { path: path.to_path_buf(), symbol: name })
}

impl Libpcap {
    /// The process-wide instance, loaded on first use; a failure to load is
    /// remembered and returned to every later call.
    pub fn system() -> Result<&'static Libpcap, LoadError> {
        SYSTEM.get_or_init(Self::load).as_ref().map_err(Clone::clone)
    }

    fn load() -> Result<Libpcap, LoadError> {
        let path = match std::env::var_os("WEIR_SYSTEM_LIBPCAP") {
            Some(p) => PathBuf::from(p),
            None => CANDIDATES
                .iter()
                .map(Path::new)
                .find(|p| p.exists())
                .map(Path::to_path_buf)
                .ok_or_else(|| LoadError::NotFound { searched: CANDIDATES.join(", ") })?,
        };
        let flags = libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_DEEPBIND;
        // SAFETY: loading libpcap runs only its ELF constructors, which have no
        // preconditions; we pass an absolute path so no search-path surprise applies.
        let lib = unsafe { libloading::os::unix::Library::open(Some(&path), flags) }
            .map_err(|e| LoadError::Open { path: path.clone(), message: e.to_string() })?;
        let lib: libloading::Library = lib.into();
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the type given matches the libpcap 1.x prototype of $name.
                unsafe { required(&lib, &path, $name) }?
            };
        }
        Ok(Libpcap {
            open_dead: sym!("pcap_open_dead"),
            compile: sym!("pcap_compile"),
            freecode: sym!("pcap_freecode"),
            geterr: sym!("pcap_geterr"),
            close: sym!("pcap_close"),
            lib_version: sym!("pcap_lib_version"),
            path,
            lib,
        })
    }

    /// Where the library was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The library's function `name`, for callers that pass calls through to
    /// the system libpcap (weir's libpcap-compatible library): one load of the
    /// library for the whole process. `None` if this libpcap lacks it.
    ///
    /// # Safety
    /// `F` is the function pointer type of `name`'s libpcap 1.10 prototype.
    pub unsafe fn symbol<F: Copy>(&self, name: &str) -> Option<F> {
        // SAFETY: as the caller promises.
        unsafe { lookup(&self.lib, name) }
    }

    /// As [`symbol`](Self::symbol), for a function the caller cannot do
    /// without: its absence is the error that names the library and `name`.
    ///
    /// # Errors
    /// This libpcap lacks `name`.
    ///
    /// # Safety
    /// `F` is the function pointer type of `name`'s libpcap 1.10 prototype.
    pub unsafe fn required<F: Copy>(&self, name: &'static str) -> Result<F, LoadError> {
        // SAFETY: as the caller promises.
        unsafe { required(&self.lib, &self.path, name) }
    }

    /// The library's version string (`pcap_lib_version()`).
    pub fn version(&self) -> String {
        // SAFETY: pcap_lib_version returns a static NUL-terminated string.
        unsafe { CStr::from_ptr((self.lib_version)()) }.to_string_lossy().into_owned()
    }

    /// Compile `expr` for `link_type` (a DLT_ value) and `snaplen`, netmask
    /// unknown, with libpcap's optimizer on if `optimize`.
    ///
    /// # Errors
    ///
    /// [`CompileError::Refused`] with libpcap's own message,
    /// [`CompileError::NulByte`] if `expr` contains a NUL byte.
    pub fn compile(&self, expr: &str, link_type: u32, snaplen: u32, optimize: bool) -> Result<Vec<BpfInsn>, CompileError> {
        let c_expr = CString::new(expr).map_err(|_| CompileError::NulByte)?;
        // SAFETY: pcap_open_dead has no preconditions; it returns NULL only on
        // allocation failure.
        let p = unsafe { (self.open_dead)(link_type as c_int, snaplen as c_int) };
        if p.is_null() {
            return Err(CompileError::OpenDead { link_type, snaplen });
        }
        let mut prog = BpfProgram { bf_len: 0, bf_insns: std::ptr::null_mut() };
        // SAFETY: `p` is a live handle, `prog` a valid out-parameter, `c_expr` NUL-terminated.
        let rc = unsafe { (self.compile)(p, &mut prog, c_expr.as_ptr(), c_int::from(optimize), NETMASK_UNKNOWN) };
        let result = if rc != 0 {
            // SAFETY: after a failed compile, pcap_geterr returns the handle's NUL-terminated message.
            Err(CompileError::Refused { message: unsafe { CStr::from_ptr((self.geterr)(p)) }.to_string_lossy().into_owned() })
        } else {
            // SAFETY: on success libpcap filled `bf_insns` with `bf_len` instructions.
            let insns = unsafe { std::slice::from_raw_parts(prog.bf_insns, prog.bf_len as usize) }.to_vec();
            // SAFETY: `prog` was filled by pcap_compile and is freed once.
            unsafe { (self.freecode)(&mut prog) };
            Ok(insns)
        };
        // SAFETY: `p` came from pcap_open_dead and is closed once.
        unsafe { (self.close)(p) };
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiles_and_reports_libpcap_errors() {
        let lib = match Libpcap::system() {
            Ok(l) => l,
            Err(e) => panic!("{e}"),
        };
        assert!(lib.version().starts_with("libpcap version"), "{}", lib.version());
        let prog = lib.compile("tcp port 80", 1, 65535, true).unwrap();
        assert_eq!(prog.len(), 20, "tcpdump -d 'tcp port 80' has 20 instructions");
        let err = lib.compile("tcp port eighty", 1, 65535, true).unwrap_err();
        assert!(matches!(&err, CompileError::Refused { message } if message.contains("eighty")), "{err}");
        assert_eq!(lib.compile("tcp\0", 1, 65535, true), Err(CompileError::NulByte));
    }
}
