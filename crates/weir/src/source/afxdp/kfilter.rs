//! The capture filter in weir's XDP program, so that what the filter rejects
//! stays with the host instead of being taken from its stack.
//!
//! The contract:
//! - [`KernelFilter::install`] translates the filter to eBPF
//!   ([`Filter::to_xdp`]), loads it, and puts it in the program array that
//!   `ebpf/weir_xdp.c` tail-calls on every captured queue. The loaded filter
//!   redirects what it accepts to the queue's socket and passes what it
//!   rejects up the stack (XDP_PASS), counting packets and bytes per queue.
//! - With no filter, or one that cannot run in the kernel (a backward jump, a
//!   verifier's refusal, or no CAP_BPF left to load it), the slot is emptied: every packet of a captured
//!   queue is redirected, and the filter runs in user space only. `install`
//!   then says why, for the user to hear.
//! - The user-space filter still runs on what the kernel accepted, so a filter
//!   replaced while packets wait on the RX ring judges them as before.
//! - [`FilterCounts::read`] gives a queue's packets and bytes passed to the
//!   stack so far (cumulative, summed over CPUs): the capture unit accounts the
//!   differences as filtered, so none is lost uncounted.
//! - The program array's entries live as long as a descriptor of the array is
//!   open: [`KernelFilter`] holds one for the capture's lifetime.

use crate::filter::{asm, helper, EbpfInsn, Filter, Reg, BLOCK_STACK, CTX, XDP_MD_RX_QUEUE};
use crate::sys::bpf::{load_xdp, map_set, Filtered};
use aya::maps::{MapData, PerCpuArray};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;

/// XDP_PASS, the verdict for what the filter rejects.
const XDP_PASS: u32 = 2;
/// The name the kernel shows for a loaded filter.
const FILTER_NAME: &str = "weir_filter";

/// The filter slot of an attached program.
pub(crate) struct KernelFilter {
    /// The program array whose slot 0 holds the filter.
    slot: MapData,
    /// Where an accepted packet goes.
    accept: Accept,
    /// The counts map, which an installed filter writes to.
    counts_fd: OwnedFd,
    counts: Arc<FilterCounts>,
}

/// What the translated filter does with a packet it accepts. The descriptor
/// is of the map its instructions name: it must stay open while it is loaded.
pub(crate) enum Accept {
    /// Redirect it to its queue's socket in this XSKMAP (`weir_xdp`).
    Redirect(OwnedFd),
    /// Tail-call this slot of this program array (`weir_xring`'s store program).
    TailCall(OwnedFd, u32),
}

/// The per-queue counts of what the kernel filter passed to the stack.
pub(crate) struct FilterCounts {
    map: PerCpuArray<MapData, Filtered>,
}

impl KernelFilter {
    /// `slot` is the program array, `counts_fd` a descriptor of `counts`.
    pub(crate) fn new(slot: MapData, accept: Accept, counts_fd: OwnedFd, counts: PerCpuArray<MapData, Filtered>) -> KernelFilter {
        KernelFilter { slot, accept, counts_fd, counts: Arc::new(FilterCounts { map: counts }) }
    }

    pub(crate) fn counts(&self) -> &Arc<FilterCounts> {
        &self.counts
    }

    /// Put `filter` in the kernel (see the module's contract). `Ok(Some(why))`
    /// when it cannot run there and every packet is taken instead.
    pub(crate) fn install(&self, filter: Option<&Filter>) -> io::Result<Option<String>> {
        let key = 0u32.to_ne_bytes();
        let Some(filter) = filter else {
            map_set(self.slot.fd().as_fd(), &key, None)?;
            return Ok(None);
        };
        let program = match filter.to_xdp(&self.accept(), &self.reject()) {
            Ok(p) => p,
            Err(why) => {
                map_set(self.slot.fd().as_fd(), &key, None)?;
                return Ok(Some(why.0));
            }
        };
        match load_xdp(FILTER_NAME, &program) {
            Ok(fd) => {
                let value = u32::try_from(fd.as_raw_fd()).unwrap_or(u32::MAX).to_ne_bytes();
                // The array takes its own reference: `fd` may close after this.
                map_set(self.slot.fd().as_fd(), &key, Some(&value))?;
                Ok(None)
            }
            // Refused, for a program that has dropped its privileges since the
            // capture opened (tcpdump sets its filter after giving up root) as for
            // a verifier's refusal: the slot, an open map, can still be emptied.
            Err(e) => {
                map_set(self.slot.fd().as_fd(), &key, None)?;
                Ok(Some(format!("the kernel refused its eBPF form: {e}")))
            }
        }
    }

    fn accept(&self) -> Vec<EbpfInsn> {
        let mut out = Vec::with_capacity(7);
        match &self.accept {
            // Passing when the queue has no socket, as weir_xdp does.
            Accept::Redirect(xsks) => {
                out.extend(asm::ld_map_fd(Reg::R1, xsks.as_raw_fd()));
                out.push(asm::ldx_w(Reg::R2, CTX, XDP_MD_RX_QUEUE));
                out.push(asm::mov32_imm(Reg::R3, XDP_PASS));
                out.push(asm::call(helper::REDIRECT_MAP));
            }
            // A tail call does not return; if the slot were empty, the packet
            // would go on to the host.
            Accept::TailCall(slots, index) => {
                out.push(asm::mov64(Reg::R1, CTX));
                out.extend(asm::ld_map_fd(Reg::R2, slots.as_raw_fd()));
                out.push(asm::mov32_imm(Reg::R3, *index));
                out.push(asm::call(helper::TAIL_CALL));
                out.push(asm::mov32_imm(Reg::R0, XDP_PASS));
            }
        }
        out.push(asm::exit());
        out
    }

    /// Count the packet for its queue, and pass it up the stack.
    fn reject(&self) -> Vec<EbpfInsn> {
        let key_at = BLOCK_STACK - 4;
        let mut out = Vec::with_capacity(20);
        out.push(asm::mov64(Reg::R1, CTX));
        out.push(asm::call(helper::XDP_GET_BUFF_LEN));
        out.push(asm::mov64(Reg::R9, Reg::R0));
        out.push(asm::ldx_w(Reg::R2, CTX, XDP_MD_RX_QUEUE));
        out.push(asm::stx_w(Reg::Fp, key_at, Reg::R2));
        // Every queue weir can capture has an entry: none goes uncounted.
        out.extend(asm::count(self.counts_fd.as_raw_fd(), key_at, 0));
        out.push(asm::mov32_imm(Reg::R0, XDP_PASS));
        out.push(asm::exit());
        out
    }
}

impl FilterCounts {
    /// Packets and bytes the kernel filter passed to the stack from `queue`, so far.
    pub(crate) fn read(&self, queue: u16) -> io::Result<Filtered> {
        sum_per_cpu(&self.map, queue)
    }
}

/// A queue's packets and bytes in a per-CPU count map, summed over CPUs.
pub(crate) fn sum_per_cpu(map: &PerCpuArray<MapData, Filtered>, queue: u16) -> io::Result<Filtered> {
    let per_cpu = map.get(&u32::from(queue), 0).map_err(|e| crate::source::live::io_error(&e))?;
    Ok(per_cpu.iter().fold(Filtered::default(), |t, c| Filtered { packets: t.packets + c.packets, bytes: t.bytes + c.bytes }))
}
