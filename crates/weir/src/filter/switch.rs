//! A filter that can be replaced while capture runs, as libpcap's
//! `pcap_setfilter` allows on a handle that is already reading.
//!
//! The contract:
//! - [`FilterSwitch::replace`] puts a new filter (or none) in place for every
//!   capture unit of one engine. Filters that run in the kernel (a socket
//!   filter) are swapped before `replace` returns, by the appliers the source
//!   registered ([`FilterSwitch::on_replace`]): a packet that reaches the
//!   socket after that is judged by the new filter, as with libpcap.
//! - Units that filter in user space hold a [`FilterWatch`] and call
//!   [`FilterWatch::changed`] before each batch (or record); from then on they
//!   judge what they capture by the new filter. The check is one atomic load;
//!   the filter is cloned (two `Arc`s) only when it did change.
//! - Packets captured before the swap were judged by the old filter and stay
//!   where they are: the caller judges them again if it must (libpcap does,
//!   for the packets already in its ring).

use super::{Filter, LinkMeta};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Puts a replacement in place in the kernel, synchronously.
pub(crate) type Applier = Box<dyn Fn(Option<&Filter>) -> io::Result<()> + Send>;

struct Shared {
    /// Bumped after each replacement, so a watch knows to look.
    generation: AtomicU64,
    current: Mutex<Current>,
    /// The interface replacements are bound to (see [`Filter::bind`]).
    link: Option<LinkMeta>,
}

struct Current {
    filter: Option<Filter>,
    appliers: Vec<Applier>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Current> {
        // A panic elsewhere while holding the lock left a whole filter behind
        // (it is replaced in one assignment): go on with it.
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The engine's end of a filter that can be replaced while capture runs.
/// Sources receive it in [`CaptureOptions::filter`](crate::source::CaptureOptions::filter);
/// a running capture's filter is replaced through
/// [`Reader::replace_filter`](crate::engine::Reader::replace_filter).
#[derive(Clone)]
pub(crate) struct FilterSwitch {
    shared: Arc<Shared>,
}

/// A capture unit's end: the filter it applies now.
#[derive(Clone)]
pub(crate) struct FilterWatch {
    shared: Arc<Shared>,
    seen: u64,
    current: Option<Filter>,
}

impl FilterSwitch {
    /// Start with `filter`, already bound to `link` if there is one;
    /// replacements are bound to it here.
    pub(crate) fn new(filter: Option<Filter>, link: Option<LinkMeta>) -> FilterSwitch {
        let current = Mutex::new(Current { filter, appliers: Vec::new() });
        FilterSwitch { shared: Arc::new(Shared { generation: AtomicU64::new(0), current, link }) }
    }

    /// Run `apply` on every replacement, before `replace` returns (a source
    /// whose filter runs in the kernel attaches the new program here).
    pub(crate) fn on_replace(&self, apply: Applier) {
        self.shared.lock().appliers.push(apply);
    }

    /// A watch starting at the filter now in place.
    pub(crate) fn watch(&self) -> FilterWatch {
        let locked = self.shared.lock();
        // Relaxed: `replace` bumps the generation under this lock, so the
        // filter and the generation read here belong together.
        let seen = self.shared.generation.load(Ordering::Relaxed);
        FilterWatch { shared: Arc::clone(&self.shared), seen, current: locked.filter.clone() }
    }

    pub(crate) fn current(&self) -> Option<Filter> {
        self.shared.lock().filter.clone()
    }

    /// Put `filter` in place: in the kernel now, and for every watch at its
    /// next check. If an applier fails, the error is returned and the watches
    /// are still told (a kernel that refused keeps its old filter, which the
    /// caller must then treat as in place only where it was applied). A
    /// filter that cannot be bound to the switch's interface is refused
    /// before anything changes.
    pub(crate) fn replace(&self, filter: Option<Filter>) -> io::Result<()> {
        let filter =
            filter.map(|f| f.bind_where_known(self.shared.link)).transpose().map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut current = self.shared.lock();
        let applied = current.appliers.iter().try_for_each(|apply| apply(filter.as_ref()));
        current.filter = filter;
        // Release: pairs with the watch's Acquire load, so a watch that sees the
        // new generation and then takes the lock finds this filter (the lock
        // alone orders the filter itself; this orders the hint).
        self.shared.generation.fetch_add(1, Ordering::Release);
        applied
    }
}

impl FilterWatch {
    /// The filter to apply now.
    #[inline]
    pub(crate) fn get(&self) -> Option<&Filter> {
        self.current.as_ref()
    }

    /// Take a replacement, if one was published since the last look; true if
    /// the filter changed.
    #[inline]
    pub(crate) fn changed(&mut self) -> bool {
        // Acquire: see the Release in `replace`.
        if self.shared.generation.load(Ordering::Acquire) == self.seen {
            return false;
        }
        self.take();
        true
    }

    /// The rare path of [`changed`](Self::changed), kept out of line so the
    /// check a capture loop makes per record is one load and a compare.
    #[cold]
    #[inline(never)]
    fn take(&mut self) {
        let locked = self.shared.lock();
        self.current = locked.filter.clone();
        // Relaxed: under the lock, as in `watch`; a replacement made since the
        // load above is taken now, not seen again as new.
        self.seen = self.shared.generation.load(Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::BpfInsn;

    fn accept(n: u32) -> Filter {
        Filter::from_program(&[BpfInsn { code: 0x06, jt: 0, jf: 0, k: n }]).expect("ret #n is valid")
    }

    #[test]
    fn a_watch_takes_each_replacement_once_and_only_after_it() {
        let switch = FilterSwitch::new(Some(accept(1)), None);
        let mut a = switch.watch();
        let mut b = a.clone();
        assert!(!a.changed());
        assert_eq!(a.get().map(|f| f.run(&[], 0)), Some(1));
        switch.replace(Some(accept(2))).expect("no appliers");
        assert!(a.changed());
        assert!(!a.changed(), "one replacement is taken once");
        assert_eq!(a.get().map(|f| f.run(&[], 0)), Some(2));
        switch.replace(None).expect("no appliers");
        switch.replace(Some(accept(3))).expect("no appliers");
        // A watch that slept through two replacements takes the last.
        assert!(b.changed());
        assert_eq!(b.get().map(|f| f.run(&[], 0)), Some(3));
        assert!(switch.watch().get().is_some());
        assert!(a.changed() && a.get().map(|f| f.run(&[], 0)) == Some(3));
    }

    #[test]
    fn a_watch_on_another_thread_sees_the_replacement() {
        let switch = FilterSwitch::new(None, None);
        let mut w = switch.watch();
        let t = std::thread::spawn(move || {
            while !w.changed() {
                std::hint::spin_loop();
            }
            w.get().map(|f| f.run(&[], 0))
        });
        switch.replace(Some(accept(7))).expect("no appliers");
        assert_eq!(t.join().expect("watcher"), Some(7));
    }

    #[test]
    fn appliers_run_before_replace_returns_and_their_errors_come_back() {
        let switch = FilterSwitch::new(None, None);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        switch.on_replace(Box::new(move |f| {
            log.lock().expect("log").push(f.map(|f| f.run(&[], 0)));
            Ok(())
        }));
        switch.replace(Some(accept(4))).expect("applied");
        switch.replace(None).expect("applied");
        assert_eq!(*seen.lock().expect("log"), vec![Some(4), None]);
        switch.on_replace(Box::new(|_| Err(io::Error::other("refused"))));
        let err = switch.replace(Some(accept(5))).expect_err("the second applier refuses");
        assert_eq!(err.to_string(), "refused");
        assert_eq!(seen.lock().expect("log").last(), Some(&Some(5)), "the first applier still ran");
        assert!(switch.watch().get().is_some(), "the watches are told even so");
    }
}
