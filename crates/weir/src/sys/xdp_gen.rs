//! The plain-data types the XDP generator's maps hold (its live-frames test
//! run is [`super::bpf::test_run`]).

// The Pod promises for the map values are unsafe; each is commented.
#![allow(unsafe_code)]

/// Longest frame the program holds; `WEIR_GEN_MAX_FRAME` in ebpf/weir_gen.c.
pub const MAX_FRAME: usize = 2048;

/// One frame of the trace, as `struct weir_gen_frame`.
#[repr(C)]
#[derive(Copy, Clone)]
pub(crate) struct Frame {
    pub(crate) len: u32,
    pub(crate) data: [u8; MAX_FRAME],
}

// SAFETY: plain old data with no padding (a u32 and bytes, 4-aligned), any bit
// pattern valid, as aya's Pod requires.
unsafe impl aya::Pod for Frame {}

/// The program's state, as `struct weir_gen_state`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct State {
    /// Frames sent so far: the next frame's number.
    pub(crate) next: u64,
    pub(crate) ifindex: u32,
    pub(crate) frames: u32,
    pub(crate) vary_ports: u32,
    pub(crate) pad: u32,
    /// Paced at a fixed gap between frames, in picoseconds (0: not).
    pub(crate) gap_ps: u64,
    /// Paced at a bit rate, each frame's gap from its length (0: not).
    pub(crate) bps: u64,
    /// When the next frame is due (bpf_ktime_get_ns), 0 before the first.
    pub(crate) due_ns: u64,
    /// The gaps' fractions of a nanosecond carried, in picoseconds.
    pub(crate) rem_ps: u64,
    /// No frame is sent once `next` reaches this.
    pub(crate) stop_at: u64,
}

// SAFETY: plain old data, no implicit padding (8 + 4 * 4 + 5 * 8 bytes), any bit pattern valid.
unsafe impl aya::Pod for State {}
