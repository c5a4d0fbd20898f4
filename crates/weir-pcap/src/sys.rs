//! The system libpcap, which weir delegates to: the filter compiler and
//! everything around it (`bpf_dump`, `bpf_image`, `bpf_filter`, the name
//! tables), the savefile writer (`pcap_dump_*`), and the interface queries.
//! weir reads packets; it does not re-implement what libpcap already does well
//! and where programs depend on its exact output.
//!
//! [`System`] holds the functions the shim calls on its own account (on a
//! dead twin of a weir handle, see [`DeadHandle`]), loaded together; the
//! functions passed through as they are ([`crate::delegate`]) are looked up
//! one by one ([`System::symbol`]), so a libpcap that lacks one fails only
//! that call.
//!
//! The library is the one weir's filter module loaded (by absolute path, with
//! `RTLD_LOCAL | RTLD_DEEPBIND` so its internal calls bind to itself, not to
//! the same-named functions this library exports): one load per process.

use crate::types::{BpfProgram, PcapIf, RawPcap};
use libc::{c_char, c_int, c_uint, FILE};
use std::sync::OnceLock;
use weir::filter::libpcap::Libpcap;

macro_rules! delegated {
    ($($field:ident : $name:literal => fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        /// Function pointers into the system libpcap.
        pub struct System {
            $(pub $field: unsafe extern "C-unwind" fn($($arg),*) $(-> $ret)?,)*
            lib: &'static Libpcap,
        }

        fn load() -> Result<System, String> {
            let lib = Libpcap::system().map_err(|e| e.to_string())?;
            Ok(System {
                $($field: {
                    // SAFETY: the type given matches the libpcap 1.10 prototype of the symbol.
                    unsafe { lib.required($name) }.map_err(|e| e.to_string())?
                },)*
                lib,
            })
        }
    };
}

delegated! {
    open_dead_prec: "pcap_open_dead_with_tstamp_precision" => fn(c_int, c_int, c_uint) -> *mut RawPcap;
    close: "pcap_close" => fn(*mut RawPcap);
    geterr: "pcap_geterr" => fn(*mut RawPcap) -> *mut c_char;
    compile: "pcap_compile" => fn(*mut RawPcap, *mut BpfProgram, *const c_char, c_int, u32) -> c_int;
    findalldevs: "pcap_findalldevs" => fn(*mut *mut PcapIf, *mut c_char) -> c_int;
    dump_open: "pcap_dump_open" => fn(*mut RawPcap, *const c_char) -> *mut c_void_dumper;
    dump_open_append: "pcap_dump_open_append" => fn(*mut RawPcap, *const c_char) -> *mut c_void_dumper;
    dump_fopen: "pcap_dump_fopen" => fn(*mut RawPcap, *mut FILE) -> *mut c_void_dumper;
}

/// The system libpcap's `pcap_dumper_t`, opaque here.
#[allow(non_camel_case_types)]
pub type c_void_dumper = libc::c_void;

static SYSTEM: OnceLock<Result<System, String>> = OnceLock::new();

/// The delegated functions, loaded on first use.
pub fn system() -> Result<&'static System, String> {
    SYSTEM.get_or_init(load).as_ref().map_err(|e| format!("the system libpcap, which weir delegates to, could not be loaded: {e}"))
}

impl System {
    /// The system library's function `name`, for the calls passed through as
    /// they are ([`crate::delegate`]); `None` if this libpcap lacks it.
    ///
    /// # Safety
    /// `F` is the function pointer type of `name`'s libpcap 1.10 prototype.
    pub unsafe fn symbol<F: Copy>(&self, name: &str) -> Option<F> {
        // SAFETY: as the caller promises.
        unsafe { self.lib.symbol(name) }
    }

    /// A dead handle of the system library for `dlt`, `snaplen` and precision,
    /// for the calls that need one (compiling, opening a dump file).
    pub fn dead(&'static self, dlt: c_int, snaplen: c_int, precision: c_uint) -> Result<DeadHandle, String> {
        // SAFETY: plain values in; NULL out is handled.
        let p = unsafe { (self.open_dead_prec)(dlt, snaplen, precision) };
        if p.is_null() {
            return Err("pcap_open_dead: out of memory".into());
        }
        Ok(DeadHandle { p, sys: self })
    }
}

/// A system `pcap_t` from `pcap_open_dead`, closed on drop.
pub struct DeadHandle {
    pub p: *mut RawPcap,
    sys: &'static System,
}

impl DeadHandle {
    /// The system handle's last error.
    pub fn error(&self) -> String {
        // SAFETY: `p` is a live handle; geterr returns its NUL-terminated buffer.
        unsafe { std::ffi::CStr::from_ptr((self.sys.geterr)(self.p)) }.to_string_lossy().into_owned()
    }
}

impl Drop for DeadHandle {
    fn drop(&mut self) {
        // SAFETY: `p` came from pcap_open_dead and is closed once.
        unsafe { (self.sys.close)(self.p) }
    }
}
