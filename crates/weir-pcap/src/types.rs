//! The C types of libpcap's API, laid out as `pcap.h` declares them on Linux.

pub use weir::filter::libpcap::{BpfInsn, BpfProgram, PcapPkthdr};

/// A `pcap_t` of the system library, opaque.
#[repr(C)]
pub struct RawPcap {
    _private: [u8; 0],
}

/// `struct pcap_stat`.
#[repr(C)]
pub struct PcapStat {
    pub ps_recv: libc::c_uint,
    pub ps_drop: libc::c_uint,
    pub ps_ifdrop: libc::c_uint,
}

/// `struct pcap_if` (`pcap_if_t`); built and freed by the system library.
#[repr(C)]
pub struct PcapIf {
    pub next: *mut PcapIf,
    pub name: *mut libc::c_char,
    pub description: *mut libc::c_char,
    pub addresses: *mut libc::c_void,
    pub flags: u32,
}

/// `pcap_handler`, never NULL.
pub type CallbackFn = unsafe extern "C-unwind" fn(*mut u8, *const PcapPkthdr, *const u8);
/// `pcap_handler` as a caller gives it: maybe NULL.
pub type Callback = Option<CallbackFn>;

/// `PCAP_ERRBUF_SIZE`.
pub const ERRBUF_SIZE: usize = 256;

pub const PCAP_ERROR: i32 = -1;
pub const PCAP_ERROR_BREAK: i32 = -2;
pub const PCAP_ERROR_NOT_ACTIVATED: i32 = -3;
pub const PCAP_ERROR_ACTIVATED: i32 = -4;
pub const PCAP_ERROR_NO_SUCH_DEVICE: i32 = -5;
pub const PCAP_ERROR_RFMON_NOTSUP: i32 = -6;
pub const PCAP_ERROR_PERM_DENIED: i32 = -8;
pub const PCAP_ERROR_TSTAMP_PRECISION_NOTSUP: i32 = -12;
pub const PCAP_WARNING_TSTAMP_TYPE_NOTSUP: i32 = 3;

pub const TSTAMP_PRECISION_MICRO: u32 = 0;
pub const TSTAMP_PRECISION_NANO: u32 = 1;
/// `PCAP_TSTAMP_HOST`: the only time stamp type weir offers (the kernel's).
pub const TSTAMP_HOST: i32 = 0;

pub const PCAP_D_INOUT: i32 = 0;
pub const PCAP_D_OUT: i32 = 2;
