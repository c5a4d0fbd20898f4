//! The packet API (`include/weir_packet.h`) called from Rust as C calls it:
//! argument checks and their error texts, statistics read inside a callback
//! while the run goes on, a stop from a callback and from another thread
//! during a pull, one thread at a time per queue, and a pull finished early.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use weirstream::packet::*;
use weirstream::ERRBUF_SIZE;

mod packet_trace;

fn error(h: *mut WeirPackets) -> String {
    // SAFETY: `h` is live; the text is a C string kept by the handle.
    unsafe { CStr::from_ptr(weir_packets_error(h)) }.to_string_lossy().into_owned()
}

fn create(source: &str) -> *mut WeirPackets {
    let name = CString::new(source).unwrap();
    let mut err = [0 as c_char; ERRBUF_SIZE];
    // SAFETY: a C string and a buffer of ERRBUF_SIZE bytes.
    let h = unsafe { weir_packets_create(name.as_ptr(), err.as_mut_ptr()) };
    // SAFETY: on failure the buffer holds a C string.
    assert!(!h.is_null(), "{}", unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy());
    h
}

/// `weir_packets_create`'s error text for `source`.
fn create_error(source: &CStr) -> String {
    let mut err = [0 as c_char; ERRBUF_SIZE];
    // SAFETY: a C string and a buffer of ERRBUF_SIZE bytes, which then holds a C string.
    unsafe {
        assert!(weir_packets_create(source.as_ptr(), err.as_mut_ptr()).is_null(), "{source:?} was taken");
        CStr::from_ptr(err.as_ptr()).to_string_lossy().into_owned()
    }
}

/// `weir_packets_set(h, key, value)`: 0, or the error text.
fn set(h: *mut WeirPackets, key: &str, value: &str) -> Result<(), String> {
    let (k, v) = (CString::new(key).unwrap(), CString::new(value).unwrap());
    // SAFETY: `h` is live; two C strings.
    match unsafe { weir_packets_set(h, k.as_ptr(), v.as_ptr()) } {
        0 => Ok(()),
        _ => Err(error(h)),
    }
}

fn stats(h: *mut WeirPackets, index: i32) -> CQueueStats {
    let mut s = CQueueStats::default();
    // SAFETY: `h` is live; `s` is writable.
    assert_eq!(unsafe { weir_packets_stats(h, index, &mut s) }, 0, "{}", error(h));
    s
}

fn trace(dir: &Path, packets: u32, flows: u32) -> (String, packet_trace::Facts) {
    let path = dir.join("t.pcap");
    let facts = packet_trace::write(&path, packets, flows);
    (path.to_str().unwrap().to_string(), facts)
}

#[test]
fn every_failure_says_why_and_nothing_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = trace(dir.path(), 100, 10);
    let mut err = [0 as c_char; ERRBUF_SIZE];
    // SAFETY: NULL is a valid argument for every entry point; the buffer holds ERRBUF_SIZE bytes.
    unsafe {
        assert!(weir_packets_create(std::ptr::null(), err.as_mut_ptr()).is_null());
        assert!(CStr::from_ptr(err.as_ptr()).to_string_lossy().contains("NULL"));
        assert!(weir_packets_create(c"x".as_ptr(), std::ptr::null_mut()).is_null(), "no errbuf is fine");
        assert_eq!(weir_packets_set(std::ptr::null_mut(), c"count".as_ptr(), c"1".as_ptr()), -1);
        assert_eq!(weir_packets_open(std::ptr::null_mut()), -1);
        assert_eq!(weir_packets_run(std::ptr::null_mut()), -1);
        assert_eq!(weir_packets_start(std::ptr::null_mut()), -1);
        assert_eq!(weir_packets_next(std::ptr::null_mut(), 0, 0, &mut CPacket::default()), -1);
        assert_eq!(weir_packets_finish(std::ptr::null_mut()), -1);
        assert_eq!(weir_packets_queues(std::ptr::null_mut()), -1);
        assert!(!CStr::from_ptr(weir_packets_error(std::ptr::null_mut())).to_bytes().is_empty());
        weir_packets_stop(std::ptr::null_mut());
        weir_packets_destroy(std::ptr::null_mut());
    }
    // Bad source names: the text says what is wrong with them.
    assert!(create_error(c"no-such-trace.pcap").contains("no-such-trace.pcap"));
    assert!(create_error(c"afxdp:").contains("not a valid interface name"), "{}", create_error(c"afxdp:"));
    assert!(create_error(&CString::new(format!("{path}@3-1")).unwrap()).contains("queue range"));

    let h = create(&format!("{path}@0-1"));
    assert_eq!(error(h), "");
    let mut p = CPacket::default();
    let mut st = CQueueStats::default();
    // SAFETY: `h` is live until destroyed at the end; the out-pointers are writable.
    unsafe {
        // Nothing is open yet.
        assert_eq!(weir_packets_queues(h), -1);
        assert!(error(h).contains("not open"), "{}", error(h));
        assert_eq!(weir_packets_linktype(h), -1);
        assert_eq!(weir_packets_stats(h, 0, &mut st), -1);
        assert!(error(h).contains("no statistics yet"), "{}", error(h));
        assert_eq!(weir_packets_next(h, 0, 0, &mut p), -1);
        assert!(error(h).contains("no pull started"), "{}", error(h));
        assert_eq!(weir_packets_finish(h), -1);
        assert!(error(h).contains("no pull to finish"), "{}", error(h));
        assert_eq!(weir_packets_run(h), -1);
        assert!(error(h).contains("no packet callback"), "{}", error(h));
        assert_eq!(weir_packets_set(h, std::ptr::null(), c"1".as_ptr()), -1);
        assert!(error(h).contains("NULL"), "{}", error(h));
    }
    for (key, value, says) in [
        ("colour", "blue", "\"colour\" is not an option"),
        ("count", "ten", "count: \"ten\" is not a whole number"),
        ("snaplen", "0", "snaplen: 0 is not from 1 to 262144"),
        ("snaplen", "262145", "snaplen: 262145 is not from 1 to 262144"),
        ("pool", "256", "pool: \"256\""),
        ("pool", "0,4", "pool: \"0,4\""),
        ("duration_ms", "-5", "duration_ms: \"-5\" is not a whole number"),
    ] {
        assert_eq!(set(h, key, value), Err(error(h)));
        assert!(error(h).contains(says), "{key}={value}: {}", error(h));
    }
    // An error text stays valid, and the same, after later failures (until destroy).
    // SAFETY: `h` is live.
    let kept = unsafe { weir_packets_error(h) };
    assert_eq!(set(h, "snaplen", "x").map_err(|e| e.contains("snaplen")), Err(true));
    // SAFETY: the handle keeps every text until it is destroyed.
    assert!(unsafe { CStr::from_ptr(kept) }.to_string_lossy().contains("duration_ms"));

    // A filter that does not compile: the open says so, naming it.
    set(h, "filter", "udp and").unwrap();
    set(h, "pool", "64,8").unwrap();
    // SAFETY: `h` is live.
    unsafe {
        assert_eq!(weir_packets_open(h), -1);
        assert!(error(h).contains("\"udp and\""), "{}", error(h));
        // The run and the start open the source too, and fail the same way.
        assert_eq!(weir_packets_start(h), -1);
        assert!(error(h).contains("\"udp and\""), "{}", error(h));
    }
    set(h, "filter", "udp").unwrap();
    // SAFETY: `h` is live; the out-pointers are writable.
    unsafe {
        assert_eq!(weir_packets_open(h), 0, "{}", error(h));
        assert_eq!(weir_packets_open(h), 0, "opening an open source does nothing");
        assert_eq!((weir_packets_queues(h), weir_packets_linktype(h)), (2, 1));
        assert_eq!(set(h, "count", "5").map_err(|e| e.contains("the source is open")), Err(true));
        // Opened: each queue's counters, at zero.
        assert_eq!(stats(h, 1), CQueueStats { queue: 1, queue_index: 1, ..CQueueStats::default() });
        assert_eq!(weir_packets_stats(h, 2, &mut st), -1);
        assert!(error(h).contains("queue index 2 is out of range"), "{}", error(h));
        assert_eq!(weir_packets_stats(h, 0, std::ptr::null_mut()), -1);
        assert_eq!(weir_packets_next(h, 0, 0, &mut p), -1);
        assert!(error(h).contains("no pull started"), "{}", error(h));
        assert_eq!(weir_packets_start(h), 0, "{}", error(h));
        assert_eq!(weir_packets_start(h), -1);
        assert!(error(h).contains("one run or pull at a time"), "{}", error(h));
        assert_eq!(weir_packets_run(h), -1);
        assert_eq!(weir_packets_next(h, 2, 0, &mut p), -1);
        assert!(error(h).contains("queue index 2 is out of range: the source has 2 queues"), "{}", error(h));
        assert_eq!(weir_packets_next(h, 0, 0, std::ptr::null_mut()), -1);
        assert_eq!(set(h, "filter", "tcp").map_err(|e| e.contains("pull")), Err(true));
        // Destroying a handle with a pull on finishes the pull.
        weir_packets_destroy(h);
    }
}

/// What the run's callbacks saw, shared by the workers.
#[derive(Default)]
struct Seen {
    handle: AtomicU64,
    packets: AtomicU64,
    /// Callbacks whose live statistics showed their packet received and not yet delivered.
    live_ok: AtomicU64,
    live_checked: AtomicU64,
    /// Stop the run at this many packets (0: never).
    stop_at: AtomicU64,
}

unsafe extern "C" fn on_packet(p: *const CPacket, user: *mut c_void) {
    // SAFETY: `user` is the test's Seen, alive for the run; `p` is valid for the call.
    let (seen, p) = unsafe { (&*user.cast::<Seen>(), &*p) };
    let h = seen.handle.load(Ordering::Relaxed) as usize as *mut WeirPackets;
    let n = seen.packets.fetch_add(1, Ordering::Relaxed) + 1;
    if n % 97 == 1 {
        let mut s = CQueueStats::default();
        // SAFETY: the handle is live while it runs; `s` is writable.
        let rc = unsafe { weir_packets_stats(h, p.queue_index as i32, &mut s) };
        // This packet is in flight: captured, not delivered until the callback returns.
        if rc == 0 && s.queue_index == p.queue_index && s.received >= 1 && s.in_flight >= 1 {
            seen.live_ok.fetch_add(1, Ordering::Relaxed);
        }
        seen.live_checked.fetch_add(1, Ordering::Relaxed);
    }
    let stop_at = seen.stop_at.load(Ordering::Relaxed);
    if n == stop_at {
        // SAFETY: the handle is live while it runs.
        unsafe { weir_packets_stop(h) };
    }
    if stop_at > 0 && n >= stop_at {
        // Slow from the stop on, so that the run sees it (within 20 ms)
        // before the workers get through the trace.
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_run_reads_its_statistics_while_it_goes_and_stops_from_a_callback() {
    let dir = tempfile::tempdir().unwrap();
    let (path, facts) = trace(dir.path(), 30_000, 500);
    let h = create(&format!("{path}@0-1"));
    // A small pool: the trace cannot be captured far ahead of the callbacks.
    set(h, "pool", "16,4").unwrap();
    let seen = Seen::default();
    seen.handle.store(h as usize as u64, Ordering::Relaxed);
    let user = std::ptr::from_ref(&seen).cast_mut().cast::<c_void>();
    // SAFETY: `h` is live until destroyed; `seen` outlives the runs; the
    // callback only uses atomics and the handle, so it is safe on several workers.
    unsafe {
        assert_eq!(weir_packets_on_packet(h, Some(on_packet), user), 0);
        assert_eq!(weir_packets_run(h), 0, "{}", error(h));
    }
    assert_eq!(seen.packets.load(Ordering::Relaxed), facts.packets);
    assert!(seen.live_checked.load(Ordering::Relaxed) > 100);
    assert_eq!(seen.live_ok.load(Ordering::Relaxed), seen.live_checked.load(Ordering::Relaxed), "statistics read inside callbacks");
    let t = stats(h, ALL_QUEUES);
    assert_eq!((t.queue, t.received, t.delivered, t.in_flight, t.received_bytes), (u32::MAX, facts.packets, facts.packets, 0, facts.bytes));
    assert_eq!(stats(h, 0).received + stats(h, 1).received, facts.packets);

    // A stop from a callback ends the run early: what was captured is still
    // delivered, and the counters add up.
    seen.packets.store(0, Ordering::Relaxed);
    seen.stop_at.store(1_000, Ordering::Relaxed);
    // SAFETY: as above.
    unsafe { assert_eq!(weir_packets_run(h), 0, "{}", error(h)) };
    let t = stats(h, ALL_QUEUES);
    let n = seen.packets.load(Ordering::Relaxed);
    assert!(n >= 1_000 && n < facts.packets, "stopped at {n}");
    assert_eq!((t.delivered, t.in_flight), (n, 0), "{t:?}");
    assert!(t.received < facts.packets && t.received == t.delivered + t.filtered, "{t:?}");

    // The flag was cleared: the next run reads it all; options may change between runs.
    seen.packets.store(0, Ordering::Relaxed);
    seen.stop_at.store(0, Ordering::Relaxed);
    set(h, "filter", "udp").unwrap();
    // SAFETY: as above.
    unsafe { assert_eq!(weir_packets_run(h), 0, "{}", error(h)) };
    assert_eq!(seen.packets.load(Ordering::Relaxed), facts.udp);
    assert_eq!(stats(h, ALL_QUEUES).filtered, facts.packets - facts.udp);
    // SAFETY: `h` is live and not running.
    unsafe { weir_packets_destroy(h) };
}

/// A raw handle pointer, for threads that use it at once (as C threads would).
#[derive(Copy, Clone)]
struct Shared(*mut WeirPackets);
// SAFETY: the handle is made for use from several threads (the header's threading).
unsafe impl Send for Shared {}

/// Pulls queue `index` to its end with `timeout_ms` waits: packets and bytes,
/// and the answers that were neither a packet nor the end.
fn pull_all(h: Shared, index: u32, timeout_ms: i32) -> (u64, u64, Vec<i32>) {
    let (mut n, mut bytes, mut odd) = (0, 0, Vec::new());
    let mut p = CPacket::default();
    loop {
        // SAFETY: the handle is live until the test finishes the pull; `p` is writable.
        match unsafe { weir_packets_next(h.0, index, timeout_ms, &mut p) } {
            1 => {
                assert_eq!(p.queue_index, index);
                // SAFETY: the packet's bytes are valid until this queue's next call.
                let data = unsafe { std::slice::from_raw_parts(p.data, p.caplen as usize) };
                assert_eq!(data[..12], [2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2], "an Ethernet frame of the trace");
                n += 1;
                bytes += u64::from(p.caplen);
            }
            END => return (n, bytes, odd),
            rc => odd.push(rc),
        }
    }
}

/// A trace of ten packets from a FIFO whose writer then holds it open until
/// told to close: its queue has not ended, and a pull waits. The FIFO's
/// path, the trace's facts, and how to close it.
fn fifo_trace(dir: &Path) -> (String, packet_trace::Facts, impl FnOnce()) {
    let (path, facts) = trace(dir, 10, 3);
    let fifo = dir.join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let bytes = std::fs::read(path).unwrap();
    let (close_tx, close_rx) = std::sync::mpsc::channel::<()>();
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            std::io::Write::write_all(&mut w, &bytes).unwrap();
            let _ = close_rx.recv_timeout(Duration::from_secs(30));
        })
    };
    let close = move || {
        close_tx.send(()).unwrap();
        writer.join().unwrap();
    };
    (fifo.to_str().unwrap().to_string(), facts, close)
}

#[test]
fn one_thread_at_a_time_pulls_a_queue_and_a_wait_without_timeout_lasts_until_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let (fifo, facts, close) = fifo_trace(dir.path());
    let h = Shared(create(&fifo));
    // SAFETY: `h` is live.
    assert_eq!(unsafe { weir_packets_start(h.0) }, 0, "{}", error(h.0));
    // Waits without a timeout: every packet, then the end once the writer closes.
    let puller = std::thread::spawn(move || pull_all(h, 0, -1));
    std::thread::sleep(Duration::from_millis(500));
    // A second puller of the queue is refused at once, not made to wait.
    let mut p = CPacket::default();
    // SAFETY: as above; `p` is writable.
    assert_eq!(unsafe { weir_packets_next(h.0, 0, 0, &mut p) }, -1);
    assert!(error(h.0).contains("queue index 0 is being pulled by another thread"), "{}", error(h.0));
    let live = stats(h.0, 0);
    assert_eq!(live.received, facts.packets, "{live:?}");
    assert!(!puller.is_finished(), "the queue has not ended: the writer holds the FIFO open");
    close();
    let (n, bytes, odd) = puller.join().unwrap();
    assert!(odd.is_empty(), "a wait without timeout answers a packet or the end: {odd:?}");
    assert_eq!((n, bytes), (facts.packets, facts.bytes));
    // SAFETY: the puller is done.
    unsafe {
        assert_eq!(weir_packets_next(h.0, 0, 0, &mut p), END, "the end stays the end");
        assert_eq!(weir_packets_finish(h.0), 0, "{}", error(h.0));
        assert_eq!(weir_packets_next(h.0, 0, 0, &mut p), END, "also once finished");
    }
    let t = stats(h.0, ALL_QUEUES);
    assert_eq!((t.received, t.delivered, t.unread, t.in_flight), (facts.packets, facts.packets, 0, 0), "{t:?}");
    // SAFETY: `h` is live and idle.
    unsafe { weir_packets_destroy(h.0) };
}

#[test]
fn a_stop_from_another_thread_ends_every_queues_pull_and_the_rest_is_unread() {
    let dir = tempfile::tempdir().unwrap();
    let (path, facts) = trace(dir.path(), 50_000, 500);
    let h = Shared(create(&format!("{path}@0-2")));
    set(h.0, "pool", "16,4").unwrap();
    // SAFETY: `h` is live.
    unsafe {
        assert_eq!(weir_packets_start(h.0), 0, "{}", error(h.0));
        assert_eq!(weir_packets_queues(h.0), 3);
    }
    // Slow pullers: 1 ms per packet, so the stop comes long before the end.
    let pullers: Vec<_> = (0..3)
        .map(|i| {
            std::thread::spawn(move || {
                // The whole handle, not its field alone (a closure takes what it uses).
                let h = h;
                let mut p = CPacket::default();
                let mut n = 0u64;
                loop {
                    // SAFETY: the handle is live until the pull is finished, after the join.
                    match unsafe { weir_packets_next(h.0, i, 100, &mut p) } {
                        1 => {
                            n += 1;
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        0 => {}
                        END => return n,
                        rc => panic!("queue index {i}: {rc}: {}", error(h.0)),
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let live = stats(h.0, ALL_QUEUES);
    assert!(live.received > 0 && live.received < facts.packets, "read while pulling: {live:?}");
    // SAFETY: `h` is live.
    unsafe { weir_packets_stop(h.0) };
    let pulled: u64 = pullers.into_iter().map(|t| t.join().unwrap()).sum();
    // SAFETY: the pullers are done.
    unsafe { assert_eq!(weir_packets_finish(h.0), 0, "{}", error(h.0)) };
    let t = stats(h.0, ALL_QUEUES);
    assert!(pulled < facts.packets, "{pulled}");
    assert_eq!((t.delivered, t.in_flight), (pulled, 0), "{t:?}");
    assert_eq!(t.received, t.delivered + t.unread, "{t:?}");
    // A finished pull's stop flag is cleared: a new pull reads everything.
    // SAFETY: `h` is live.
    assert_eq!(unsafe { weir_packets_start(h.0) }, 0, "{}", error(h.0));
    // Every queue at once: one not pulled would hold the others' capture back.
    let pullers: Vec<_> = (0..3).map(|i| std::thread::spawn(move || pull_all(h, i, 1_000))).collect();
    let all: u64 = pullers.into_iter().map(|t| t.join().unwrap().0).sum();
    assert_eq!(all, facts.packets);
    // SAFETY: the pullers are done.
    unsafe {
        assert_eq!(weir_packets_finish(h.0), 0, "{}", error(h.0));
        weir_packets_destroy(h.0);
    }
}

#[test]
fn a_pull_finished_early_counts_what_was_left_unread() {
    let dir = tempfile::tempdir().unwrap();
    let (path, facts) = trace(dir.path(), 20_000, 100);
    let h = create(&format!("{path}@0-1"));
    set(h, "pool", "64,8").unwrap();
    set(h, "count", "5000").unwrap();
    let mut p = CPacket::default();
    // SAFETY: `h` is live; `p` is writable.
    unsafe {
        assert_eq!(weir_packets_start(h), 0, "{}", error(h));
        for _ in 0..10 {
            assert_eq!(weir_packets_next(h, 0, 1_000, &mut p), 1, "{}", error(h));
        }
        assert_eq!(weir_packets_finish(h), 0, "{}", error(h));
    }
    let t = stats(h, ALL_QUEUES);
    assert_eq!((t.delivered, t.in_flight), (10, 0), "{t:?}");
    assert!(t.unread > 0 && t.received == 10 + t.unread && t.received <= 5_000 && t.received < facts.packets, "{t:?}");
    // SAFETY: `h` is live and idle.
    unsafe { weir_packets_destroy(h) };
}

#[test]
fn a_pull_ends_at_its_time_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (fifo, facts, close) = fifo_trace(dir.path());
    let h = Shared(create(&fifo));
    set(h.0, "duration_ms", "300").unwrap();
    let started = std::time::Instant::now();
    // SAFETY: `h` is live.
    assert_eq!(unsafe { weir_packets_start(h.0) }, 0, "{}", error(h.0));
    // The writer holds the FIFO open: only the limit ends the queue.
    let (n, _, odd) = pull_all(h, 0, -1);
    let took = started.elapsed();
    assert!(odd.is_empty());
    assert_eq!(n, facts.packets);
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(10), "{took:?}");
    // SAFETY: the pull's thread (this one) is done.
    unsafe {
        assert_eq!(weir_packets_finish(h.0), 0, "{}", error(h.0));
        weir_packets_destroy(h.0);
    }
    close();
}
