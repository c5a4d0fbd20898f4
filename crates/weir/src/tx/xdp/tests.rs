use super::*;

#[test]
fn map_values_have_the_c_layout() {
    // struct weir_gen_frame and struct weir_gen_state in ebpf/weir_gen.c.
    assert_eq!(std::mem::size_of::<sys::Frame>(), 4 + MAX_FRAME);
    assert_eq!(std::mem::size_of::<sys::State>(), 64);
}

#[test]
fn what_cannot_be_sent_is_refused_before_anything_is_opened() {
    let opts = XdpGenOptions::default();
    let e = XdpGenerator::open("weir-no-such0", &[], &opts).err().unwrap();
    assert!(matches!(e, GenError::Empty) && e.is_bad_input(), "{e}");
    let many = vec![vec![0u8; 60]; MAX_FRAMES + 1];
    let e = XdpGenerator::open("weir-no-such0", &many, &opts).err().unwrap();
    assert!(matches!(e, GenError::TooMany { frames } if frames == MAX_FRAMES + 1), "{e}");
    assert!(e.to_string().contains("at most 65536 packets"), "{e}");
    let e = XdpGenerator::open("weir-no-such0", &[vec![0; 60]], &XdpGenOptions { batch: 0, ..opts.clone() }).err().unwrap();
    assert!(matches!(e, GenError::Options(_)) && e.is_bad_input(), "{e}");
    let e = XdpGenerator::open("weir-no-such0", &[vec![0; 60]], &XdpGenOptions { batch: 257, ..opts }).err().unwrap();
    assert!(e.to_string().contains("batch 257 is not 1 to 256"), "{e}");
}

#[test]
fn a_refused_live_run_names_the_cause() {
    let e = GenError::NoLiveFrames { iface: "veth0".into(), error: io::Error::from_raw_os_error(libc::EINVAL) };
    assert!(!e.is_bad_input());
    let text = e.to_string();
    assert!(text.contains("BPF_F_TEST_XDP_LIVE_FRAMES") && text.contains("Linux 5.18") && text.contains("without --xdp"), "{text}");
}

#[test]
fn pacing_becomes_a_gap_or_a_bit_rate_and_recorded_timing_is_refused() {
    assert_eq!(pace(Pacing::TopSpeed).unwrap(), (0, 0));
    assert_eq!(pace(Pacing::Pps(100_000.0)).unwrap(), (10_000_000, 0));
    assert_eq!(pace(Pacing::Pps(3.0)).unwrap(), (333_333_333_333, 0));
    assert_eq!(pace(Pacing::Mbps(100.0)).unwrap(), (0, 100_000_000));
    for bad in [Pacing::Pps(0.0), Pacing::Pps(2e9), Pacing::Pps(f64::NAN), Pacing::Mbps(1e8), Pacing::Speed(2.0)] {
        let e = pace(bad).err().unwrap();
        assert!(matches!(e, GenError::Options(_)) && e.is_bad_input(), "{bad:?}: {e}");
    }
    let e = XdpGenerator::open("weir-no-such0", &[vec![0; 60]], &XdpGenOptions { pacing: Pacing::Speed(1.0), ..XdpGenOptions::default() })
        .err()
        .unwrap();
    assert!(e.to_string().contains("--speed"), "{e}");
}
