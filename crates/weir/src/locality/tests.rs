use super::*;
use proptest::prelude::*;

/// The naive model: a stable sort by key, keyless entries last.
fn model(batch: &[(Option<u16>, u32)]) -> Vec<u32> {
    let mut v = batch.to_vec();
    v.sort_by_key(|&(k, _)| k.map_or(u32::from(u16::MAX) + 1, u32::from));
    v.into_iter().map(|(_, e)| e).collect()
}

fn drained(index: &mut PortIndex<u32>) -> Vec<u32> {
    index.sort().to_vec()
}

proptest! {
    /// Delivery order is the stable sort by key, batch after batch on one index
    /// (so a reset that left anything behind shows up in the next batch).
    #[test]
    fn delivers_as_a_stable_sort_by_key(
        batches in proptest::collection::vec(
            proptest::collection::vec(prop_oneof![
                3 => (0u16..8).prop_map(Some),
                2 => any::<u16>().prop_map(Some),
                1 => Just(None::<u16>),
            ], 0..300),
            1..5),
    ) {
        let mut index = PortIndex::new();
        let mut serial = 0u32;
        for keys in batches {
            let batch: Vec<(Option<u16>, u32)> = keys.into_iter().map(|k| { serial += 1; (k, serial) }).collect();
            for &(k, e) in &batch {
                index.push(k, e);
            }
            prop_assert_eq!(index.len(), batch.len());
            prop_assert_eq!(drained(&mut index), model(&batch));
            prop_assert!(index.is_empty());
        }
    }
}

#[test]
fn the_extreme_keys_and_the_keyless_list_are_in_place() {
    let mut index = PortIndex::new();
    for (k, e) in [(None, 1), (Some(u16::MAX), 2), (Some(0), 3), (Some(63), 4), (Some(64), 5), (None, 6), (Some(0), 7)] {
        index.push(k, e);
    }
    assert_eq!(drained(&mut index), vec![3, 7, 4, 5, 2, 1, 6]);
    assert_eq!(drained(&mut index), Vec::<u32>::new());
}

#[test]
fn batch_sizes_are_checked() {
    assert!(BatchSize::new(0).is_err());
    assert!(BatchSize::new(MAX_BATCH + 1).is_err());
    assert_eq!(BatchSize::new(8000).map(BatchSize::get), Ok(8000));
}

#[test]
fn the_key_is_the_smaller_port_of_tcp_and_udp_only() {
    // Ethernet + IPv4 (20 bytes) + the first 8 bytes of the transport header.
    let frame = |proto: u8, sport: u16, dport: u16| {
        let mut f = vec![0u8; 14 + 20 + 8];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[16..18].copy_from_slice(&28u16.to_be_bytes());
        f[22] = 64;
        f[23] = proto;
        f[26..30].copy_from_slice(&[198, 18, 0, 1]);
        f[30..34].copy_from_slice(&[198, 19, 0, 1]);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    };
    assert_eq!(sort_key(LinkType::ETHERNET, &frame(ip_proto::TCP, 40000, 80)), Some(80));
    assert_eq!(sort_key(LinkType::ETHERNET, &frame(ip_proto::UDP, 53, 40000)), Some(53));
    assert_eq!(sort_key(LinkType::ETHERNET, &frame(132, 1000, 2000)), None, "SCTP goes on the keyless list");
    assert_eq!(sort_key(LinkType::ETHERNET, &frame(ip_proto::TCP, 1, 2)[..30]), None, "a cut header has no key");
}

proptest! {
    /// The in-place path gives the flow tuple's answer on every frame it takes:
    /// random bytes behind an untagged IPv4 Ethernet header, with the version,
    /// header length, fragment field, protocol and length drawn to hit each edge.
    #[test]
    fn the_in_place_key_agrees_with_the_flow_tuple(
        ver_ihl in prop_oneof![Just(0x45u8), Just(0x46), Just(0x4f), Just(0x44), Just(0x65), any::<u8>()],
        frag in prop_oneof![Just(0u16), Just(0x4000), Just(0x2000), Just(1), any::<u16>()],
        proto in prop_oneof![Just(ip_proto::TCP), Just(ip_proto::UDP), Just(132u8), any::<u8>()],
        body in proptest::collection::vec(any::<u8>(), 0..80),
        cut in 0usize..100,
    ) {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f.extend_from_slice(&body);
        if f.len() > 14 { f[14] = ver_ihl; }
        if f.len() > 21 { f[20..22].copy_from_slice(&frag.to_be_bytes()); }
        if f.len() > 23 { f[23] = proto; }
        f.truncate(f.len().min(14 + cut));
        prop_assert!(untagged_ipv4_key(LinkType::ETHERNET, &f).is_some());
        prop_assert_eq!(sort_key(LinkType::ETHERNET, &f), general_key(LinkType::ETHERNET, &f));
    }

    /// Every other frame falls through to the flow tuple.
    #[test]
    fn other_frames_take_the_general_path(ether in any::<u16>(), body in proptest::collection::vec(any::<u8>(), 0..80)) {
        prop_assume!(ether != 0x0800);
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ether.to_be_bytes());
        f.extend_from_slice(&body);
        prop_assert!(untagged_ipv4_key(LinkType::ETHERNET, &f).is_none());
        prop_assert!(untagged_ipv4_key(LinkType::RAW, &f).is_none());
    }
}
