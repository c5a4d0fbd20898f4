//! The kernel cutoff in the stream layer: a stream direction that passed its
//! cutoff is installed in the kernel's flow map (`source::live::cutoff`), so
//! its packets stop reaching the pool, and what the kernel counted of them is
//! taken back into its record when it closes or hands out a record.
//!
//! The contract:
//! - A direction is installed once the bytes it offered reached its cutoff
//!   (cutoff 0, flow statistics: at its first packet) and its record counts
//!   [`StreamConfig::kernel_install_after`](crate::stream::StreamConfig::kernel_install_after)
//!   packets, while it is open and
//!   not past its FIN, if it is TCP or UDP. For TCP, not while the opposite
//!   direction is still reassembled below its cutoff with its receive window
//!   checked: this direction's ACKs open that window.
//! - Its entry is taken (read and deleted in one call) before the
//!   application sees its record: at its close, for every reason, and at an
//!   active-timeout record, after which it is installed again. The taken
//!   counts are added to the record as if weir had seen the packets: packets,
//!   octets, payload bytes (all past the cutoff, so discarded), TCP flags and
//!   the last packet's time. So a record is the same with and without the
//!   kernel cutoff, but for retransmitted bytes from before the cutoff that
//!   arrive after the install: the kernel counts them as discarded, where
//!   weir would have found them duplicates.
//! - A connection the table finds idle while one of its directions is
//!   installed is kept if the kernel saw a packet of it within the idle
//!   timeout (its entry's time), with that time as its last; a packet of it
//!   that does reach weir marks it seen before the table looks for idle ones.
//!   A kept direction past its active timeout hands out its record then (up
//!   to the idle timeout late: its packets do not reach weir to do it).
//! - Installed is for the record: a cutoff a callback raises afterwards
//!   does not take the direction out (its bytes stay discarded, counted by
//!   the kernel), as the bytes already past the old cutoff stay discarded.
//! - Every install that fails (map full, or refused) is counted and the
//!   stream stays with the user-space cutoff; it is not tried again until
//!   its next active-timeout record. When the map is full, the installed
//!   connection of this worker whose idle timeout would end first, among
//!   those it saw least recently, makes room ([`make_room`]).

use super::dir::{Bits, Rec, Spare};
use super::{active_record, offered, Closing, Conn, Dir, Env};
use crate::flowtable::{End, Flow, FlowTable};
use crate::source::live::cutoff::{Counters, FlowKey, InstallError, KernelCutoff};
use crate::stream::{CloseReason, KernelStats, StreamHandler};
use crate::wire::FlowTuple;

/// The kernel's key of direction `d` of the connection `conn`.
fn key<S>(d: &Dir<S>, conn: &FlowTuple) -> Option<FlowKey> {
    let t = d.tuple(conn);
    let (src, dst, sport, dport) = t.endpoints();
    FlowKey::new(src, dst, sport, dport, t.protocol())
}

/// Whether any direction of a connection is installed.
pub(super) fn installed<S>(c: &Conn<S>) -> bool {
    c.dirs.iter().flatten().any(|d| d.bits.has(Bits::IN_KERNEL))
}

/// Adds what the kernel counted of a direction's dropped packets to its record.
fn merge(rec: &mut Rec, c: &Counters) {
    rec.packets += c.packets;
    rec.octets += c.octets;
    rec.bytes += c.payload;
    // Every byte the kernel dropped lies past the cutoff.
    rec.discarded += c.payload;
    rec.tcp_flags |= c.tcp_flags;
    if c.packets > 0 {
        rec.last_ns = rec.last_ns.max(c.last_ns);
    }
}

/// Installs `this` if it is due (see the module's contract). True when the
/// map was full: the caller may make room ([`make_room`]) and try again.
pub(super) fn install<S>(
    this: &mut Dir<S>,
    other: Option<&Dir<S>>,
    conn: &FlowTuple,
    after: u64,
    k: &mut KernelCutoff,
    stats: &mut KernelStats,
) -> bool {
    let no = this.bits.has(Bits::IN_KERNEL) || this.bits.has(Bits::KERNEL_REFUSED);
    if no || this.state.is_none() || this.rec.closed.is_some() || this.rec.packets < after {
        return false;
    }
    if this.cutoff().is_none_or(|c| offered(this) < c) {
        return false;
    }
    let window_open = other.is_none_or(|o| {
        o.delivery
            .as_ref()
            .and_then(|x| x.reasm.as_ref())
            .is_none_or(|r| !r.checks_window() || o.cutoff().is_some_and(|c| r.next_offset() >= c))
    });
    if !window_open {
        return false;
    }
    let Some(key) = key(this, conn) else { return false };
    match k.install(&key) {
        Ok(()) => {
            this.bits.set(Bits::IN_KERNEL, true);
            stats.installed += 1;
            false
        }
        Err(e) => {
            this.bits.set(Bits::KERNEL_REFUSED, true);
            match e {
                InstallError::Full => stats.full += 1,
                InstallError::Failed => stats.failed += 1,
            }
            matches!(e, InstallError::Full)
        }
    }
}

/// Connections looked at, least recently seen first, for one to leave the
/// full map.
const ROOM_CANDIDATES: usize = 8;

/// The map was full when direction `side` of connection `key` was due: of
/// this worker's connections seen least recently ([`ROOM_CANDIDATES`] of
/// them, where installed connections sink, as their packets stop reaching
/// weir), the installed one whose last packet (in the kernel or in weir) is
/// the oldest, so whose idle timeout would end first, leaves the map: its
/// entries are taken into its records (exact, as at a close) and its packets
/// reach weir again, not to be installed again before their next record.
/// Then `key`'s direction is installed in its place.
pub(super) fn make_room<H: StreamHandler>(
    table: &mut FlowTable<FlowTuple, Conn<H::State>>,
    env: &mut Env<'_, H>,
    key: FlowTuple,
    side: usize,
) {
    let Some(k) = env.kernel.as_deref_mut() else { return };
    let mut victim: Option<(FlowTuple, u64)> = None;
    for cand in table.oldest_keys(ROOM_CANDIDATES) {
        let Some(c) = table.get(&cand).filter(|c| cand != key && installed(c)) else { continue };
        let last = c.dirs.iter().flatten().map(|d| d.rec.last_ns).max().unwrap_or(0).max(last_seen(c, &cand, k));
        if victim.is_none_or(|(_, l)| last < l) {
            victim = Some((cand, last));
        }
    }
    let Some((victim, _)) = victim else { return };
    if let Some(c) = table.get_mut(&victim) {
        for d in c.dirs.iter_mut().flatten().filter(|d| d.bits.has(Bits::IN_KERNEL)) {
            take(d, &victim, k, &mut env.stats.kernel, None);
            d.bits.set(Bits::KERNEL_REFUSED, true);
            env.stats.kernel.displaced += 1;
        }
    }
    if let Some(c) = table.get_mut(&key) {
        let [d0, d1] = &mut c.dirs;
        let (this, other) = if side == 0 { (d0, d1) } else { (d1, d0) };
        if let Some(this) = this.as_mut() {
            this.bits.set(Bits::KERNEL_REFUSED, false);
            // It was due when the map was full: no second wait for its packets.
            install(this, other.as_ref(), &key, 0, k, &mut env.stats.kernel);
        }
    }
}

/// Takes `d`'s entry out of the map, if it is installed, into its record.
/// `reason` is why `d` closes (`None`: an active-timeout record).
///
/// Returns the counts that belong after the record is handed out, if any.
/// A direction closed by the FIN or RST weir just read holds the packets
/// before that segment: if the kernel stopped the entry at the segment, all
/// it counted came before. If it did not, the segment passed before weir
/// installed the entry (weir installed while the segment waited to be read)
/// and every packet counted came after it: weir would have read them after
/// the record was handed out, so they are added to the record only then
/// (its bytes refused, as a closed stream's are), which is where the layer's
/// totals take them from.
pub(super) fn take<S>(
    d: &mut Dir<S>,
    conn: &FlowTuple,
    k: &mut KernelCutoff,
    stats: &mut KernelStats,
    reason: Option<CloseReason>,
) -> Option<Counters> {
    if !d.bits.has(Bits::IN_KERNEL) {
        return None;
    }
    d.bits.set(Bits::IN_KERNEL, false);
    let Some(Ok(Some(c))) = key(d, conn).map(|key| k.take(&key)) else {
        stats.lost += 1;
        return None;
    };
    stats.taken += 1;
    stats.evicted += u64::from(reason == Some(CloseReason::Evicted));
    stats.packets += c.packets;
    stats.octets += c.octets;
    if matches!(reason, Some(CloseReason::Fin | CloseReason::Rst)) && !c.stopped {
        stats.after_end += c.packets;
        return Some(c);
    }
    merge(&mut d.rec, &c);
    None
}

/// Adds to a record already handed out the packets the kernel counted after
/// its end (see [`take`]), as weir counts a closed stream's packets.
pub(super) fn after_close<S>(d: &mut Dir<S>, c: &Counters, spare: &mut Spare) {
    d.rec.packets += c.packets;
    d.rec.octets += c.octets;
    d.rec.bytes += c.payload;
    if c.payload > 0 {
        d.delivery.get_or_insert_with(|| spare.delivery()).refused += c.payload;
    }
}

/// A connection the table let go of: kept aside in `revive` if it is idle
/// with a direction installed (the kernel may have seen it), else to close.
pub(super) fn leaving<S>(
    flow: Flow<FlowTuple, Conn<S>>,
    why: End,
    closing: &mut Vec<Closing<S>>,
    revive: &mut Vec<Flow<FlowTuple, Conn<S>>>,
) {
    if why == End::Idle && installed(&flow.value) {
        revive.push(flow);
    } else {
        closing.push((flow.key, flow.value, if why == End::Idle { CloseReason::Idle } else { CloseReason::Evicted }));
    }
}

/// Puts back into the table the connections of `revive` that the kernel saw
/// within `idle_ns` of `now`, with the kernel's last time as their last;
/// the others are closed idle (into `closing`). A kept direction past its
/// active timeout (`active_ns`, flows mode) hands out its record here: its
/// packets do not reach weir to do it.
///
/// Called for every packet, and almost always with nothing to do (always,
/// without a kernel map): the check is inlined into the caller, and the
/// work is a call of its own, so that a packet pays neither a drain nor the
/// register saves of a large function (about 30 instructions).
#[inline]
pub(super) fn revive<H: StreamHandler>(
    table: &mut FlowTable<FlowTuple, Conn<H::State>>,
    env: &mut Env<'_, H>,
    revive: &mut Vec<Flow<FlowTuple, Conn<H::State>>>,
    closing: &mut Vec<Closing<H::State>>,
    idle_ns: u64,
    active_ns: Option<u64>,
) {
    if !revive.is_empty() {
        revive_now(table, env, revive, closing, idle_ns, active_ns);
    }
}

#[inline(never)]
fn revive_now<H: StreamHandler>(
    table: &mut FlowTable<FlowTuple, Conn<H::State>>,
    env: &mut Env<'_, H>,
    revive: &mut Vec<Flow<FlowTuple, Conn<H::State>>>,
    closing: &mut Vec<Closing<H::State>>,
    idle_ns: u64,
    active_ns: Option<u64>,
) {
    let now = env.now;
    for mut flow in revive.drain(..) {
        let last = env.kernel.as_deref().map_or(0, |k| last_seen(&flow.value, &flow.key, k));
        if last.saturating_add(idle_ns) < now || last == 0 {
            closing.push((flow.key, flow.value, CloseReason::Idle));
            continue;
        }
        env.key = flow.key;
        env.stats.kernel.refreshed += 1;
        flow.last_ns = flow.last_ns.max(last);
        if let Some(active) = active_ns {
            for d in flow.value.dirs.iter_mut().flatten().filter(|d| d.bits.has(Bits::IN_KERNEL)) {
                if now.saturating_sub(d.rec.first_ns) >= active {
                    active_record(d, now, env);
                }
            }
        }
        let back = table
            .put(flow, |f, why| closing.push((f.key, f.value, if why == End::Idle { CloseReason::Idle } else { CloseReason::Evicted })));
        if let Err(f) = back {
            // Its key came back as a new connection meanwhile: this one ends.
            closing.push((f.key, f.value, CloseReason::Idle));
        }
    }
}

/// The latest time the kernel counted a packet of a connection's installed
/// directions (0: none).
fn last_seen<S>(c: &Conn<S>, conn: &FlowTuple, k: &KernelCutoff) -> u64 {
    c.dirs
        .iter()
        .flatten()
        .filter(|d| d.bits.has(Bits::IN_KERNEL))
        .filter_map(|d| key(d, conn).and_then(|key| k.peek(&key).ok().flatten()))
        .map(|c| c.last_ns)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
