use super::workload::{Burst, Skewed, LINE_RATE_64B_10G};
use super::*;
use crate::balance::{BalanceMode as Mode, ControllerConfig};
use crate::pool::OffloadThreshold;

/// WireCAP's heavy application: about 38,800 packets/s.
const HEAVY_NS: u64 = 25_773;
const LIGHT_NS: u64 = 100;

fn weir(m: usize, r: usize, mode: Mode) -> EngineKind {
    EngineKind::Weir { pool: PoolConfig::new(m, r).unwrap(), mode }
}

fn burst(engine: EngineKind, cost: u64, p: u64) -> SimReport {
    let cfg = SimConfig::new(1, cost, engine).unwrap();
    run(&cfg, &mut Burst::new(p, LINE_RATE_64B_10G, 64).unwrap()).unwrap()
}

fn books(r: &SimReport) {
    assert_eq!(r.arrived, r.delivered + r.drops(), "{r:?}");
}

#[test]
fn pool_size_decides_a_burst_for_a_heavy_application() {
    // R×M = 128,000 cells hold 100,000 packets; 25,600 do not.
    let big = burst(weir(256, 500, Mode::Basic), HEAVY_NS, 100_000);
    let small = burst(weir(256, 100, Mode::Basic), HEAVY_NS, 100_000);
    books(&big);
    books(&small);
    assert_eq!(big.drops(), 0, "{big:?}");
    let rate = small.drop_rate();
    assert!((0.70..0.76).contains(&rate), "WireCAP-B-(256,100) at P=100,000: drop rate {rate}");
    assert_eq!(small.drops(), small.capture_drops, "a depleted pool is a capture drop");
}

#[test]
fn equal_pool_memory_performs_alike() {
    let rates: Vec<f64> =
        [(64, 400), (128, 200), (256, 100)].iter().map(|&(m, r)| burst(weir(m, r, Mode::Basic), HEAVY_NS, 50_000).drop_rate()).collect();
    let spread = rates.iter().cloned().fold(f64::MIN, f64::max) - rates.iter().cloned().fold(f64::MAX, f64::min);
    assert!(spread < 0.01, "drop rates {rates:?}");
}

#[test]
fn ring_only_engine_overflows_early() {
    let ring = burst(EngineKind::RingOnly { descriptors: 1024 }, LIGHT_NS, 6_000);
    let pool = burst(weir(256, 100, Mode::Basic), LIGHT_NS, 6_000);
    books(&ring);
    assert!(ring.drop_rate() > 0.10 && ring.drop_rate() < 0.25, "{ring:?}");
    assert_eq!(pool.drops(), 0, "{pool:?}");
}

#[test]
fn copy_buffer_engine_holds_its_slots() {
    let cb = |p| burst(EngineKind::CopyBuffer { descriptors: 1024, slots: 10_240, copy_ns: 60 }, HEAVY_NS, p);
    assert_eq!(cb(10_000).drops(), 0);
    let r = cb(50_000);
    books(&r);
    assert!(r.delivery_drops > 30_000, "{r:?}");
}

fn skewed(seed: u64) -> Skewed {
    // 6 heavy workers' worth of load at 85%, over Zipf(1.1) flows: one queue
    // gets about 1.3 times what its worker can do.
    let per_worker = 1e9 / HEAVY_NS as f64;
    Skewed::new(300_000, 20_000, 1.1, per_worker * 6.0 * 0.85, seed).unwrap()
}

fn imbalance(mode: Mode, seed: u64) -> SimReport {
    let cfg = SimConfig::new(6, HEAVY_NS, weir(64, 64, mode)).unwrap();
    run(&cfg, &mut skewed(seed)).unwrap()
}

#[test]
fn deterministic_for_a_seed() {
    let mode = Mode::Rebalance { controller: ControllerConfig::default(), offload: None };
    assert_eq!(imbalance(mode, 7), imbalance(mode, 7));
}

#[test]
fn offloading_and_rebalancing_beat_basic_mode_under_lasting_imbalance() {
    let basic = imbalance(Mode::Basic, 1);
    let hot = *basic.per_queue.iter().max().unwrap() as f64 / basic.arrived as f64;
    assert!(hot > 1.0 / 6.0 * 1.25, "workload not skewed enough: hottest queue {hot}");
    assert!(basic.drops() > 0, "basic mode must drop here: {basic:?}");
    let adv = imbalance(Mode::Advanced(OffloadThreshold::new(50).unwrap()), 1);
    let reb = imbalance(Mode::Rebalance { controller: ControllerConfig::default(), offload: None }, 1);
    for r in [&basic, &adv, &reb] {
        books(r);
    }
    assert!(adv.offloaded > 0 && adv.drops() < basic.drops(), "advanced {adv:?}");
    assert!(reb.buckets_moved > 0 && reb.drops() < basic.drops(), "rebalance {reb:?}");
    assert_eq!(reb.order.reorder_events, 0, "rebalancing must never reorder a flow");
    assert_eq!(basic.order.reorder_events, 0);
    assert!(
        reb.order.flows_changed_worker < adv.order.flows_changed_worker,
        "rebalancing moved {} flows, offloading {}",
        reb.order.flows_changed_worker,
        adv.order.flows_changed_worker
    );
}

#[test]
fn config_is_checked() {
    assert!(SimConfig::new(0, 1, EngineKind::RingOnly { descriptors: 1 }).is_err());
    assert!(SimConfig::new(1, 0, EngineKind::RingOnly { descriptors: 1 }).is_err());
    assert!(SimConfig::new(1, 1, EngineKind::RingOnly { descriptors: 0 }).is_err());
    assert!(SimConfig::new(1, 1, EngineKind::CopyBuffer { descriptors: 1, slots: 0, copy_ns: 1 }).is_err());
}
