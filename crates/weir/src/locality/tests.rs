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
            prop_assert_eq!(index.len(), 0);
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
