//! The forwarder's C API (`include/weir_forward.h`) called as C calls it, on a
//! three-namespace veth bed (sender, forwarder, receiver; no addresses): a
//! verdict callback drops every odd-numbered frame, and the counts, the
//! callback's own tally and the receiver's device counter agree, on both
//! backends. Root only (`#[ignore]`d).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use weirstream::forward::*;

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

struct Bed {
    ns: [String; 3],
    ifs: [String; 4],
}

impl Bed {
    fn new() -> Bed {
        testbed::require_root();
        // Tests of this binary run at once: each bed has names of its own.
        let id = format!("{}{}", std::process::id() % 100_000, NEXT.fetch_add(1, Ordering::Relaxed));
        let ns = [format!("wcs-{id}"), format!("wcf-{id}"), format!("wcr-{id}")];
        let ifs = [format!("wcs{id}"), format!("wci{id}"), format!("wco{id}"), format!("wcr{id}")];
        for n in &ns {
            ip(&["netns", "add", n]);
            let st = Command::new("ip").args(["netns", "exec", n, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]).status();
            assert!(st.unwrap().success());
        }
        ip(&["link", "add", &ifs[0], "type", "veth", "peer", "name", &ifs[1]]);
        ip(&["link", "add", &ifs[2], "type", "veth", "peer", "name", &ifs[3]]);
        for (i, n) in [(0, 0), (1, 1), (2, 1), (3, 2)] {
            ip(&["link", "set", &ifs[i], "netns", &ns[n]]);
            ip(&["-n", &ns[n], "link", "set", &ifs[i], "up"]);
        }
        Bed { ns, ifs }
    }

    /// RX packets of the receiver's end.
    fn received(&self) -> u64 {
        let out = Command::new("ip").args(["-n", &self.ns[2], "-j", "-s", "link", "show", &self.ifs[3]]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let at = text.find("\"rx\":").expect("ip -j -s shows rx");
        let rest = &text[at..];
        let p = rest.find("\"packets\":").unwrap() + 10;
        rest[p..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap()
    }

    /// A forwarder from the bed's IN to OUT on `backend`, to stop after `n`
    /// packets (or 20 s).
    fn forwarder(&self, backend: &str, n: u32) -> *mut WeirForward {
        let (i, o) = (CString::new(self.ifs[1].as_str()).unwrap(), CString::new(self.ifs[2].as_str()).unwrap());
        let mut err = [0 as c_char; weirstream::ERRBUF_SIZE];
        // SAFETY: two C strings and a buffer of ERRBUF_SIZE bytes.
        let h = unsafe { weir_forward_create(i.as_ptr(), o.as_ptr(), err.as_mut_ptr()) };
        assert!(!h.is_null());
        set(h, "backend", backend);
        set(h, "netns", &self.ns[1]);
        set(h, "count", &n.to_string());
        set(h, "duration_ms", "20000");
        h
    }

    /// Run `h` on a thread of its own and send frames 0..n from the sender
    /// once it listens; its return code and error text.
    fn run_sending(&self, h: *mut WeirForward, n: u32) -> (c_int, String) {
        let hp = h as usize;
        let runner = std::thread::spawn(move || {
            // SAFETY: the handle lives until the caller destroys it, after this thread is joined.
            let rc = unsafe { weir_forward_run(hp as *mut WeirForward) };
            // SAFETY: as above.
            (rc, unsafe { CStr::from_ptr(weir_forward_error(hp as *mut WeirForward)) }.to_string_lossy().into_owned())
        });
        // Sent once the forwarder listens: it counts every frame, so a frame sent
        // before it listened would show as missing, not pass silently.
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let opts = weir::tx::TxOptions { netns: Some(self.ns[0].clone().into()), ..weir::tx::TxOptions::default() };
        let mut tx = weir::tx::TxRing::open(&self.ifs[0], &opts).unwrap();
        for k in 0..n {
            tx.send(&frame(k)).unwrap();
        }
        tx.flush().unwrap();
        runner.join().unwrap()
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        for n in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// Frame `i`: Ethernet/IPv4/UDP with `i` in its payload's first four bytes.
fn frame(i: u32) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
    f.extend_from_slice(&[0x45, 0, 0, 46, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2]);
    f.extend_from_slice(&[0x9c, 0x40, 0, 9, 0, 26, 0, 0]);
    f.extend_from_slice(&i.to_be_bytes());
    f.resize(60, 0xab);
    f
}

/// Counts the callback's calls; drops odd-numbered frames.
unsafe extern "C" fn odd_out(data: *const u8, caplen: u32, _: u32, _: u64, direction: c_int, _: c_int, user: *mut c_void) -> c_int {
    // SAFETY: the header's contract: `caplen` bytes at `data` for the call; `user` is the test's counter.
    let (bytes, seen) = unsafe { (std::slice::from_raw_parts(data, caplen as usize), &*(user as *const AtomicU64)) };
    seen.fetch_add(1, Ordering::Relaxed);
    let i = u32::from_be_bytes(bytes[42..46].try_into().unwrap());
    if direction == 0 && i % 2 == 0 {
        0
    } else {
        1
    }
}

fn set(h: *mut WeirForward, k: &str, v: &str) {
    let (k, v) = (CString::new(k).unwrap(), CString::new(v).unwrap());
    // SAFETY: a live handle and two C strings.
    let rc = unsafe { weir_forward_set(h, k.as_ptr(), v.as_ptr()) };
    // SAFETY: the handle keeps its error text.
    assert_eq!(rc, 0, "{}", unsafe { CStr::from_ptr(weir_forward_error(h)) }.to_string_lossy());
}

#[test]
#[ignore = "needs root: the forwarder's C API on a three-namespace veth bed"]
fn a_c_verdict_callback_drops_by_verdict_and_the_counts_say_so() {
    let bed = Bed::new();
    let n = 1000u32;
    for backend in ["afxdp", "afpacket"] {
        let h = bed.forwarder(backend, n);
        let seen = AtomicU64::new(0);
        // SAFETY: a live handle; the callback and its counter outlive the run.
        assert_eq!(unsafe { weir_forward_on_verdict(h, Some(odd_out), &seen as *const AtomicU64 as *mut c_void) }, 0);
        let before = bed.received();
        let (rc, msg) = bed.run_sending(h, n);
        assert_eq!(rc, 0, "{backend}: {msg}");
        let mut st = CForwardStats::default();
        // SAFETY: a live handle and a stats struct.
        assert_eq!(unsafe { weir_forward_stats(h, &mut st) }, 0);
        let half = u64::from(n / 2);
        assert_eq!(st, CForwardStats { received: u64::from(n), forwarded: half, dropped: half, ..CForwardStats::default() }, "{backend}");
        assert_eq!(seen.load(Ordering::Relaxed), u64::from(n), "{backend}: the callback judged every packet");
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(bed.received() - before, half, "{backend}: the receiver got exactly the passed frames");
        // SAFETY: the run is over; not used again.
        unsafe { weir_forward_destroy(h) };
    }
}

/// The in-kernel backend through the C API: with no callback every frame is
/// forwarded by XDP and counted; with one, the run is refused (no verdict
/// can run where no packet reaches the process).
#[test]
#[ignore = "needs root: the forwarder's C API on a three-namespace veth bed"]
fn the_xdp_backend_forwards_without_a_callback_and_refuses_one() {
    let bed = Bed::new();
    // XDP frames redirected to a veth need its peer's NAPI: GRO on (UDP is not merged).
    let st = Command::new("ip").args(["netns", "exec", &bed.ns[2], "ethtool", "-K", &bed.ifs[3], "gro", "on"]).status();
    assert!(st.unwrap().success());
    let n = 1000u32;
    let h = bed.forwarder("xdp", n);
    let seen = AtomicU64::new(0);
    // SAFETY: a live handle; the callback and its counter outlive the run.
    assert_eq!(unsafe { weir_forward_on_verdict(h, Some(odd_out), &seen as *const AtomicU64 as *mut c_void) }, 0);
    // SAFETY: a live handle, no run holding it.
    assert_eq!(unsafe { weir_forward_run(h) }, -1);
    // SAFETY: the handle keeps its error text.
    let msg = unsafe { CStr::from_ptr(weir_forward_error(h)) }.to_string_lossy().into_owned();
    assert!(msg.contains("no application verdict can run"), "{msg}");
    // SAFETY: as above; NULL passes all.
    assert_eq!(unsafe { weir_forward_on_verdict(h, None, std::ptr::null_mut()) }, 0);
    let before = bed.received();
    let (rc, msg) = bed.run_sending(h, n);
    assert_eq!(rc, 0, "{msg}");
    let mut st = CForwardStats::default();
    // SAFETY: a live handle and a stats struct.
    assert_eq!(unsafe { weir_forward_stats(h, &mut st) }, 0);
    assert_eq!(st, CForwardStats { received: u64::from(n), forwarded: u64::from(n), ..CForwardStats::default() });
    assert_eq!(seen.load(Ordering::Relaxed), 0, "no packet reached the process");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(bed.received() - before, u64::from(n), "the receiver got every frame");
    // SAFETY: the run is over; not used again.
    unsafe { weir_forward_destroy(h) };
}
