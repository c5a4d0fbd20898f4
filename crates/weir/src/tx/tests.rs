//! The ring's shape and errors, and, on a real veth pair (root only: ignored by
//! a plain `cargo test`, run by `make test`'s privileged step), what `TxRing`
//! does with frames.

use super::*;
use std::process::Command;
use testbed::TestBed;

#[test]
fn geometry_fits_the_mtu() {
    let opts = TxOptions::default();
    let g = geometry(1500, &opts, 4096).unwrap();
    assert_eq!((g.frame_size, g.block_size, g.frames), (2048, 64 << 10, 2048));
    // A jumbo MTU gets slots that hold a tagged full-size frame.
    let g = geometry(9000, &opts, 4096).unwrap();
    assert_eq!(g.frame_size, 16384);
    assert!(g.frame_size - sys::DATA_OFFSET >= 9000 + ETH_HLEN + VLAN_HLEN);
    // Loopback's 64 KiB MTU: one slot per block, blocks as large as a slot.
    let g = geometry(65536, &opts, 4096).unwrap();
    assert_eq!((g.frame_size, g.block_size, g.frames_per_block()), (131072, 131072, 1));
    // Frames round up to whole blocks.
    let g = geometry(1500, &TxOptions { frames: 33, ..opts.clone() }, 4096).unwrap();
    assert_eq!((g.frames, g.blocks()), (64, 2));
    // A slot size that does not divide the block leaves the rest unused.
    let g = geometry(1500, &TxOptions { frame_size: Some(1600), ..opts.clone() }, 4096).unwrap();
    assert_eq!(g.frames_per_block(), 40);
    assert_eq!(g.frames % 40, 0);
}

#[test]
fn geometry_rejects_bad_options() {
    let opts = TxOptions::default();
    for bad in [
        TxOptions { frame_size: Some(1000), ..opts.clone() },
        TxOptions { frame_size: Some(32), ..opts.clone() },
        TxOptions { frames: 0, ..opts.clone() },
        TxOptions { batch: 0, ..opts.clone() },
    ] {
        let e = geometry(1500, &bad, 4096).unwrap_err();
        assert!(e.is_bad_input(), "{e}");
    }
}

#[test]
fn errors_name_the_sizes() {
    let e = TxError::FrameTooLarge { len: 3000, max: 2016, frame_size: 2048 };
    assert_eq!(e.to_string(), "a frame of 3000 bytes does not fit the TX ring's slots of 2048 bytes (2016 bytes of packet at most)");
    let e = TxError::AboveMtu { iface: "eth1".into(), len: 1600, mtu: 1500, limit: 1514 };
    assert!(e.to_string().contains("MTU 1500") && e.to_string().contains("1514"), "{e}");
    let e = TxError::NoSuchInterface { iface: "nope0".into(), netns: Some("lab".into()) };
    assert_eq!(e.to_string(), "no network interface \"nope0\" in network namespace lab");
}

#[test]
fn backoff_grows_to_a_millisecond() {
    let mut b = Backoff::default();
    let t = Instant::now();
    for _ in 0..Backoff::YIELDS {
        b.wait();
    }
    assert!(t.elapsed() < Duration::from_millis(50));
    b.round = 100;
    let t = Instant::now();
    b.wait();
    assert!(t.elapsed() >= Backoff::MAX_SLEEP);
}

fn opts(tb: &TestBed) -> TxOptions {
    TxOptions { netns: Some(tb.tx_ns.clone().into()), ..TxOptions::default() }
}

/// A broadcast Ethernet frame of `len` bytes (an experimental EtherType, so the
/// receiving stack drops it at once).
fn frame(len: usize) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x88, 0xb5]);
    f.resize(len, 0xab);
    f
}

/// Wait up to a second for the capturing end to count `n` packets.
fn arrives(tb: &TestBed, n: u64) -> bool {
    let until = Instant::now() + Duration::from_secs(1);
    while tb.rx_link_packets() < n {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[test]
#[ignore = "needs root: a TX ring on a veth test bed"]
fn sends_counts_and_refuses_what_does_not_fit() {
    let tb = TestBed::new(1);
    // Slots of 256 bytes: 224 bytes of packet each.
    let mut ring = TxRing::open(&tb.tx_if, &TxOptions { frame_size: Some(256), frames: 64, batch: 8, ..opts(&tb) }).unwrap();
    assert_eq!((ring.mtu(), ring.max_frame(), ring.shape()), (1500, 224, (256, 256)));
    let base = tb.rx_link_packets();

    let e = ring.send(&frame(300)).unwrap_err();
    assert!(matches!(e, TxError::FrameTooLarge { len: 300, max: 224, frame_size: 256 }), "{e}");
    assert!(e.to_string().contains("256 bytes"), "{e}");
    assert!(matches!(ring.send(&frame(13)), Err(TxError::TooShort { len: 13 })));

    // 1000 frames through a 256-slot ring: it wraps, nothing is lost.
    for _ in 0..1000 {
        ring.send(&frame(200)).unwrap();
    }
    ring.flush().unwrap();
    let st = ring.stats();
    assert_eq!((st.sent, st.bytes, st.queued), (1000, 200_000, 0));
    assert!(arrives(&tb, base + 1000), "{} of 1000 arrived", tb.rx_link_packets() - base);

    // The MTU, not the slot, limits a ring with big slots; a VLAN tag earns 4 bytes.
    let mut ring = TxRing::open(&tb.tx_if, &opts(&tb)).unwrap();
    assert_eq!(ring.max_frame(), 1514);
    assert!(matches!(ring.send(&frame(1515)), Err(TxError::AboveMtu { len: 1515, mtu: 1500, limit: 1514, .. })));
    let mut tagged = frame(1518);
    tagged[12..18].copy_from_slice(&[0x81, 0x00, 0x00, 0x05, 0x88, 0xb5]);
    ring.send(&tagged).unwrap();
    ring.send(&frame(1514)).unwrap();
    ring.flush().unwrap();
    assert_eq!(ring.stats().sent, 2);
}

#[test]
#[ignore = "needs root: a TX ring on a veth test bed"]
fn partial_batches_leave_on_flush_kick_or_drop() {
    let tb = TestBed::new(1);
    let base = tb.rx_link_packets();
    let mut ring = TxRing::open(&tb.tx_if, &TxOptions { batch: 1000, ..opts(&tb) }).unwrap();
    for _ in 0..10 {
        ring.send(&frame(100)).unwrap();
    }
    assert_eq!(ring.stats().queued, 10, "a partial batch waits");
    ring.kicker().kick();
    assert!(arrives(&tb, base + 10));
    ring.send(&frame(100)).unwrap();
    drop(ring);
    assert!(arrives(&tb, base + 11), "dropping the ring sends its last partial batch");
}

#[test]
#[ignore = "needs root: a TX ring on a veth test bed"]
fn open_errors_say_what_is_wrong() {
    let tb = TestBed::new(1);
    let e = TxRing::open("nosuch0", &opts(&tb)).err().unwrap();
    assert!(matches!(e, TxError::NoSuchInterface { .. }) && e.is_bad_input(), "{e}");
    let e = TxRing::open(&tb.tx_if, &TxOptions { netns: Some("weir-no-such-ns".into()), ..TxOptions::default() }).err().unwrap();
    assert!(matches!(e, TxError::Netns { not_found: true, .. }) && e.is_bad_input(), "{e}");
    let ok = Command::new("ip").args(["-n", &tb.tx_ns, "link", "set", &tb.tx_if, "down"]).status().unwrap();
    assert!(ok.success());
    let e = TxRing::open(&tb.tx_if, &opts(&tb)).err().unwrap();
    assert!(matches!(e, TxError::Down { .. }), "{e}");
    let e = TxRing::open("lo", &TxOptions { frame_size: Some(100), ..opts(&tb) }).err().unwrap();
    assert!(matches!(e, TxError::Options(_)), "{e}");
}

#[test]
#[ignore = "needs root: a TX ring on a veth test bed"]
fn a_link_going_down_is_an_error_not_a_loss() {
    let tb = TestBed::new(1);
    let mut ring = TxRing::open(&tb.tx_if, &TxOptions { batch: 1, ..opts(&tb) }).unwrap();
    ring.send(&frame(100)).unwrap();
    ring.flush().unwrap();
    let ok = Command::new("ip").args(["-n", &tb.tx_ns, "link", "set", &tb.tx_if, "down"]).status().unwrap();
    assert!(ok.success());
    // The frame is queued; the failed hand-over is reported by the next call.
    ring.send(&frame(100)).unwrap();
    let e = ring.send(&frame(100)).unwrap_err();
    assert!(matches!(&e, TxError::Send { error, .. } if error.raw_os_error() == Some(libc::ENETDOWN)), "{e}");
    assert_eq!((ring.stats().sent, ring.stats().queued), (1, 1));
    // Back up, the queued frame goes out with the next flush.
    let ok = Command::new("ip").args(["-n", &tb.tx_ns, "link", "set", &tb.tx_if, "up"]).status().unwrap();
    assert!(ok.success());
    ring.flush().unwrap();
    assert_eq!((ring.stats().sent, ring.stats().queued), (2, 0));
}
