//! The C API called from Rust, as C calls it: argument checks and error
//! texts, the stream record and user slot seen by the callbacks, stop.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CStr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::LinkType;
use weirstream::handler::{CStream, StreamInfo};
use weirstream::*;

/// `n` UDP packets of 100 payload bytes, from 192.0.2.1:1000+(i%flows) to 192.0.2.2:53.
fn udp_trace(path: &Path, n: u32, flows: u16) {
    let mut w =
        TraceWriter::new(std::fs::File::create(path).unwrap(), FileFormat::Pcap, LinkType::ETHERNET, 65535, TsPrecision::Micro).unwrap();
    for i in 0..n {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 8, 0];
        f.extend_from_slice(&[0x45, 0, 0, 128, 0, 0, 0, 0, 64, 17, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2]);
        f.extend_from_slice(&(1000 + (i % u32::from(flows)) as u16).to_be_bytes());
        f.extend_from_slice(&53u16.to_be_bytes());
        f.extend_from_slice(&[0, 108, 0, 0]);
        f.resize(14 + 128, i as u8);
        w.write_packet(1_700_000_000_000_000_000 + u64::from(i) * 1000, &f, f.len() as u32).unwrap();
    }
    w.finish().unwrap();
}

fn error(h: *mut WeirStreams) -> String {
    // SAFETY: `h` is live; the text is a C string kept by the handle.
    unsafe { CStr::from_ptr(weir_streams_error(h)) }.to_string_lossy().into_owned()
}

fn create(source: &str) -> *mut WeirStreams {
    let name = std::ffi::CString::new(source).unwrap();
    let mut err = [0 as c_char; ERRBUF_SIZE];
    // SAFETY: a C string and a buffer of ERRBUF_SIZE bytes.
    let h = unsafe { weir_streams_create(name.as_ptr(), err.as_mut_ptr()) };
    // SAFETY: on failure the buffer holds a C string.
    assert!(!h.is_null(), "{}", unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy());
    h
}

#[test]
fn arguments_are_checked_and_errors_explained() {
    let mut err = [0 as c_char; ERRBUF_SIZE];
    // SAFETY: NULL is a valid argument for every entry point; the buffer holds ERRBUF_SIZE bytes.
    unsafe {
        assert!(weir_streams_create(std::ptr::null(), err.as_mut_ptr()).is_null());
        assert!(CStr::from_ptr(err.as_ptr()).to_string_lossy().contains("NULL"));
        assert!(weir_streams_create(c"afxdp:".as_ptr(), err.as_mut_ptr()).is_null());
        assert!(!CStr::from_ptr(err.as_ptr()).to_bytes().is_empty());
        assert_eq!(weir_streams_set_mode(std::ptr::null_mut(), 0), -1);
        assert_eq!(weir_streams_run(std::ptr::null_mut()), -1);
        weir_streams_stop(std::ptr::null_mut());
        weir_streams_destroy(std::ptr::null_mut());
        assert_eq!(weir_stream_discard(std::ptr::null_mut()), -1);
        assert!(weir_stream_get_user(std::ptr::null_mut()).is_null());
    }
    // SAFETY: a C string and a buffer of ERRBUF_SIZE bytes, which then holds a C string.
    unsafe {
        assert!(weir_streams_create(c"no-such-trace.pcap".as_ptr(), err.as_mut_ptr()).is_null());
        assert!(CStr::from_ptr(err.as_ptr()).to_string_lossy().contains("no-such-trace.pcap"));
    }
    let dir = tempfile::tempdir().unwrap();
    let not_a_trace = dir.path().join("not-a-trace.pcap");
    std::fs::write(&not_a_trace, b"not a trace at all, longer than a pcap file header").unwrap();
    let h = create(not_a_trace.to_str().unwrap());
    // SAFETY: `h` is live until destroyed at the end.
    unsafe {
        assert_eq!(error(h), "");
        assert_eq!(weir_streams_set_mode(h, 7), -1);
        assert!(error(h).contains("not a mode"), "{}", error(h));
        assert_eq!(weir_streams_set_mode(h, 2), 0);
        assert_eq!(weir_streams_set_cutoff(h, -2), -1);
        assert_eq!(weir_streams_set_cutoff(h, -1), 0);
        assert_eq!(weir_streams_set_piece(h, 0, 0), -1);
        assert_eq!(weir_streams_set_piece(h, 100, 100), -1);
        assert!(error(h).contains("overlap"), "{}", error(h));
        assert_eq!(weir_streams_set_piece(h, 100, 10), 0);
        assert_eq!(weir_streams_set_idle_timeout_ms(h, 0), -1);
        assert_eq!(weir_streams_set_max_streams(h, 0), -1);
        assert_eq!(weir_streams_add_cutoff_class(h, c" ".as_ptr(), 0), -1);
        assert_eq!(weir_streams_add_cutoff_class(h, std::ptr::null(), 0), -1);
        assert_eq!(weir_streams_add_cutoff_class(h, c"port 25".as_ptr(), 0), 0);
        for (expr, cutoff, mode, priority, says) in [
            (c" ".as_ptr(), UNSET, UNSET as i32, UNSET as i32, "expression is empty"),
            (std::ptr::null(), UNSET, UNSET as i32, UNSET as i32, "NULL"),
            (
                c"udp".as_ptr(),
                -3,
                UNSET as i32,
                UNSET as i32,
                "class `udp`: a cutoff is a number of bytes, -1 (none) or WEIR_UNSET, not -3",
            ),
            (c"udp".as_ptr(), UNSET, 3, UNSET as i32, "class `udp`: 3 is not a mode"),
            (c"udp".as_ptr(), UNSET, UNSET as i32, 4, "class `udp`: a priority is 0 to 3 or WEIR_UNSET, not 4"),
            (c"udp".as_ptr(), UNSET, UNSET as i32, -1, "not -1"),
        ] {
            assert_eq!(weir_streams_add_class(h, expr, cutoff, mode, priority), -1, "{says}");
            assert!(error(h).contains(says), "{}", error(h));
        }
        assert_eq!(weir_streams_add_class(h, c"port 53".as_ptr(), -1, 0, 3), 0);
        assert_eq!(weir_streams_add_class(h, c"port 54".as_ptr(), UNSET, UNSET as i32, UNSET as i32), 0);
        assert_eq!(weir_streams_set_filter(h, c"udp".as_ptr()), 0);
        assert_eq!(weir_streams_set_filter(h, std::ptr::null()), 0);
        assert_eq!(weir_streams_stats(h, std::ptr::null_mut()), -1);
        // The source is not a trace: the run says so.
        assert_eq!(weir_streams_run(h), -1);
        assert!(error(h).contains("not-a-trace.pcap"), "{}", error(h));
        weir_streams_destroy(h);
    }
}

/// What the callbacks saw, shared by the workers.
#[derive(Default)]
struct Seen {
    created: AtomicU64,
    closed: AtomicU64,
    slot_kept: AtomicU64,
    payload: AtomicU64,
    record_ok: AtomicU64,
    stop_after: AtomicU64,
    handle: AtomicU64,
}

unsafe extern "C" fn on_created(s: *mut CStream, user: *mut c_void) {
    // SAFETY: `user` is the test's Seen, alive for the run; `s` is the callback's stream.
    unsafe {
        let seen = &*user.cast::<Seen>();
        let n = seen.created.fetch_add(1, Ordering::Relaxed) + 1;
        assert_eq!(weir_stream_set_user(s, (n as usize) as *mut c_void), 0);
        assert_eq!(weir_stream_set_priority(s, 9), 0);
        assert_eq!(weir_stream_set_priority(s, -1), -1);
        let stop = seen.stop_after.load(Ordering::Relaxed);
        if stop > 0 && n >= stop {
            weir_streams_stop(seen.handle.load(Ordering::Relaxed) as usize as *mut WeirStreams);
        }
    }
}

unsafe extern "C" fn on_data(s: *mut CStream, _data: *const u8, len: usize, _offset: u64, user: *mut c_void) {
    // SAFETY: as in on_created.
    unsafe {
        let seen = &*user.cast::<Seen>();
        assert!(!weir_stream_get_user(s).is_null());
        seen.payload.fetch_add(len as u64, Ordering::Relaxed);
    }
}

unsafe extern "C" fn on_closed(s: *mut CStream, user: *mut c_void) {
    // SAFETY: as in on_created.
    unsafe {
        let seen = &*user.cast::<Seen>();
        seen.closed.fetch_add(1, Ordering::Relaxed);
        if !weir_stream_get_user(s).is_null() {
            seen.slot_kept.fetch_add(1, Ordering::Relaxed);
        }
        let mut info = StreamInfo::default();
        assert_eq!(weir_stream_info(s, &mut info), 0);
        assert_eq!(weir_stream_set_cutoff(s, 10), -1, "a closed stream cannot be steered");
        let ok = info.family == 4
            && info.src[..4] == [192, 0, 2, 1]
            && info.dst[..4] == [192, 0, 2, 2]
            && info.dport == 53
            && (1000..1010).contains(&info.sport)
            && info.protocol == 17
            && info.direction == 0
            && info.close_reason == 5
            && info.cutoff == -1
            && info.priority == 3
            && info.packets * 100 == info.bytes
            && info.delivered == info.bytes;
        if ok {
            seen.record_ok.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[test]
fn callbacks_see_the_record_and_the_user_slot_and_stop_ends_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("udp.pcap");
    udp_trace(&trace, 1000, 10);
    let h = create(trace.to_str().unwrap());
    let seen = Seen::default();
    seen.handle.store(h as usize as u64, Ordering::Relaxed);
    let user = std::ptr::from_ref(&seen).cast_mut().cast::<c_void>();
    let mut stats = CStats::default();
    // SAFETY: `h` is live until destroyed; `seen` outlives the runs; the
    // callbacks only use atomics, so they are safe on several workers.
    unsafe {
        assert_eq!(weir_streams_on_created(h, Some(on_created), user), 0);
        assert_eq!(weir_streams_on_data(h, Some(on_data), user), 0);
        assert_eq!(weir_streams_on_closed(h, Some(on_closed), user), 0);
        assert_eq!(weir_streams_run(h), 0, "{}", error(h));
        assert_eq!(weir_streams_stats(h, &mut stats), 0);
    }
    assert_eq!((seen.created.load(Ordering::Relaxed), seen.closed.load(Ordering::Relaxed)), (10, 10));
    assert_eq!(seen.slot_kept.load(Ordering::Relaxed), 10);
    assert_eq!(seen.record_ok.load(Ordering::Relaxed), 10);
    assert_eq!(seen.payload.load(Ordering::Relaxed), 100_000);
    assert_eq!((stats.packets, stats.streams, stats.delivered, stats.closed_end), (1000, 10, 100_000, 10));

    // A stop asked for from a callback ends the run, cleanly; the next run reads everything again.
    seen.stop_after.store(1, Ordering::Relaxed);
    // SAFETY: as above.
    unsafe {
        assert_eq!(weir_streams_run(h), 0, "{}", error(h));
        assert_eq!(weir_streams_stats(h, &mut stats), 0);
        assert!(stats.packets >= 1 && stats.packets <= 1000);
        seen.stop_after.store(0, Ordering::Relaxed);
        assert_eq!(weir_streams_run(h), 0, "{}", error(h));
        assert_eq!(weir_streams_stats(h, &mut stats), 0);
        assert_eq!(stats.packets, 1000);
        weir_streams_destroy(h);
    }
}

/// Per client port 1000..1010: the mode and priority its stream closed with.
static CLASSED: [AtomicU64; 10] = [const { AtomicU64::new(0) }; 10];

unsafe extern "C" fn note_class(s: *mut CStream, _user: *mut c_void) {
    let mut info = StreamInfo::default();
    // SAFETY: `s` is the callback's stream.
    assert_eq!(unsafe { weir_stream_info(s, &mut info) }, 0);
    CLASSED[usize::from(info.sport - 1000)].store(((info.mode as u64) << 8) | info.priority as u64, Ordering::Relaxed);
}

#[test]
fn a_class_gives_its_streams_a_mode_a_cutoff_and_a_priority() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("udp.pcap");
    // Ten flows of 100 datagrams of 100 bytes, on two queues.
    udp_trace(&trace, 1000, 10);
    let h = create(&format!("{}@0-1", trace.display()));
    let mut stats = CStats::default();
    // SAFETY: `h` is live until destroyed; the callback only uses atomics.
    unsafe {
        assert_eq!(weir_streams_add_class(h, c"udp src port 1000".as_ptr(), UNSET, 0, UNSET as i32), 0, "{}", error(h));
        assert_eq!(weir_streams_add_class(h, c"udp src port 1001".as_ptr(), 50, UNSET as i32, 2), 0, "{}", error(h));
        // Never reached: the first match wins.
        assert_eq!(weir_streams_add_class(h, c"udp".as_ptr(), 0, UNSET as i32, 1), 0, "{}", error(h));
        assert_eq!(weir_streams_on_closed(h, Some(note_class), std::ptr::null_mut()), 0);
        assert_eq!(weir_streams_run(h), 0, "{}", error(h));
        assert_eq!(weir_streams_stats(h, &mut stats), 0);
        weir_streams_destroy(h);
    }
    // Port 1000: tracked, nothing delivered; 1001: 50 bytes; the others: a cutoff of 0.
    assert_eq!((stats.streams, stats.delivered, stats.discarded, stats.bytes), (10, 50, 99_950, 100_000));
    let got: Vec<u64> = CLASSED.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    let mut want = vec![(1 << 8) | 1; 10];
    want[0] = 0;
    want[1] = (1 << 8) | 2;
    assert_eq!(got, want, "mode << 8 | priority per port");
}

/// The last stream pointer a data callback was given, kept past its callback.
static KEPT: AtomicU64 = AtomicU64::new(0);
/// Whether weir_stream_info answered 0 on that pointer inside its own callback.
static INSIDE_OK: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" fn keep_stream(s: *mut CStream, _data: *const u8, _len: usize, _offset: u64, _user: *mut c_void) {
    let mut info = StreamInfo::default();
    // SAFETY: `s` is the callback's stream, used during the callback.
    if unsafe { weir_stream_info(s, &mut info) } == 0 && info.protocol == 17 {
        INSIDE_OK.fetch_add(1, Ordering::Relaxed);
    }
    KEPT.store(s as usize as u64, Ordering::Relaxed);
}

#[test]
fn a_stream_kept_past_its_callback_is_refused_after_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("udp.pcap");
    udp_trace(&trace, 200, 4);
    // Two queues: two workers, whose threads are gone when the run returns.
    let h = create(&format!("{}@0-1", trace.display()));
    // SAFETY: `h` is live until destroyed; the callback only uses atomics.
    unsafe {
        assert_eq!(weir_streams_on_data(h, Some(keep_stream), std::ptr::null_mut()), 0);
        assert_eq!(weir_streams_run(h), 0, "{}", error(h));
    }
    assert!(INSIDE_OK.load(Ordering::Relaxed) > 0, "inside its callback the stream answers");
    let kept = KEPT.load(Ordering::Relaxed) as usize as *mut CStream;
    assert!(!kept.is_null());
    let mut info = StreamInfo::default();
    // SAFETY: the functions must refuse a pointer used outside its callback
    // (the header's promise, which this checks) without reading through it.
    unsafe {
        assert_eq!(weir_stream_info(kept, &mut info), -1);
        assert_eq!(weir_stream_set_cutoff(kept, 10), -1);
        assert_eq!(weir_stream_discard(kept), -1);
        assert_eq!(weir_stream_set_priority(kept, 1), -1);
        assert_eq!(weir_stream_set_user(kept, kept.cast()), -1);
        assert!(weir_stream_get_user(kept).is_null());
        // The handle is unharmed: it runs again, and the pointer from that run is refused too.
        assert_eq!(weir_streams_run(h), 0, "{}", error(h));
        assert_eq!(weir_stream_info(KEPT.load(Ordering::Relaxed) as usize as *mut CStream, &mut info), -1);
        weir_streams_destroy(h);
    }
    assert_eq!(info.protocol, 0, "nothing was written to `out`");
}
