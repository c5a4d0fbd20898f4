use super::*;
use proptest::prelude::*;
use std::collections::VecDeque;

fn pair(m: usize, r: usize) -> (CaptureSide, WorkerSide, Arc<QueueCounters>) {
    let counters = Arc::new(QueueCounters::new(QueueId(3)));
    let cfg = PoolConfig::new(m, r).unwrap();
    let (c, w) = work_queue_pair(QueueId(3), &cfg, Arc::clone(&counters), None).unwrap();
    (c, w, counters)
}

/// A packet whose bytes encode its sequence number, so the test can see it arrive intact.
fn packet(seq: u32, len: usize) -> Vec<u8> {
    let mut p = vec![(seq % 251) as u8; len.max(4)];
    p[..4].copy_from_slice(&seq.to_le_bytes());
    p
}

fn seq_of(p: &Packet<'_>) -> u32 {
    u32::from_le_bytes(p.data()[..4].try_into().unwrap())
}

fn state_census(pool: &Pool) -> [usize; 4] {
    let mut n = [0; 4];
    for i in 0..pool.chunks() as u32 {
        n[pool.state(i).0 as usize] += 1;
    }
    n
}

#[derive(Clone, Debug)]
enum Op {
    Push(u16),
    Flush,
    Take,
    Release(usize),
    BadRecycle(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1u16..3000).prop_map(Op::Push),
        1 => Just(Op::Flush),
        2 => Just(Op::Take),
        2 => (0usize..8).prop_map(Op::Release),
        1 => (0u8..4).prop_map(Op::BadRecycle),
    ]
}

/// What the model expects: the attached chunk, the chunks published but not taken
/// (in order), and the chunks the worker holds, each as its packet sequence numbers.
#[derive(Default)]
struct Model {
    attached: Vec<u32>,
    attached_bytes: usize,
    published: VecDeque<Vec<u32>>,
    held: Vec<(ChunkToken, Vec<u32>)>,
    pushed: u64,
    dropped: u64,
    delivered: u64,
    bad: u64,
}

impl Model {
    fn publish(&mut self) {
        if !self.attached.is_empty() {
            self.published.push_back(std::mem::take(&mut self.attached));
            self.attached_bytes = 0;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 256 }))]

    /// The pool against a state table: every packet pushed is taken once, in order;
    /// NoCell happens exactly when the model has no free chunk; bad recycles are
    /// refused, counted, and change nothing else; the chunk-state census matches;
    /// and the stats identity holds after every step.
    #[test]
    fn pool_matches_model(m in 1usize..6, r in 2usize..5, ops in proptest::collection::vec(op(), 1..120)) {
        let (mut cap, mut work, counters) = pair(m, r);
        let chunk_bytes = cap.pool.chunk_bytes;
        let mut model = Model::default();
        let mut seq = 0u32;
        for op in ops {
            match op {
                Op::Push(len) => {
                    let len = usize::from(len);
                    let fits = !model.attached.is_empty()
                        && model.attached.len() < m
                        && model.attached_bytes + len <= chunk_bytes;
                    if !fits {
                        // The pool publishes a full chunk before it looks for a free one.
                        model.publish();
                    }
                    let free = r - model.published.len() - model.held.len() - usize::from(!model.attached.is_empty());
                    let got = cap.push_copy(&packet(seq, len), len as u32 + 10, u64::from(seq));
                    if fits || free > 0 {
                        prop_assert!(got.is_ok(), "push {} refused with a free chunk", seq);
                        model.attached.push(seq);
                        model.attached_bytes += (len + 7) & !7;
                        model.pushed += 1;
                    } else {
                        prop_assert_eq!(got, Err(NoCell));
                        cap.drop_capture(len as u32 + 10);
                        model.dropped += 1;
                    }
                    seq += 1;
                }
                Op::Flush => {
                    cap.flush();
                    model.publish();
                }
                Op::Take => {
                    let got = work.take_raw();
                    match model.published.pop_front() {
                        Some(want) => {
                            let t = got.expect("a published chunk was not delivered");
                            let c = work.raw_chunk(t).unwrap();
                            let seqs: Vec<u32> = (0..c.len()).map(|i| seq_of(&c.get(i).unwrap())).collect();
                            prop_assert_eq!(&seqs, &want);
                            for i in 0..c.len() {
                                let p = c.get(i).unwrap();
                                prop_assert_eq!(p.ts_ns(), u64::from(seq_of(&p)));
                                prop_assert_eq!(p.queue(), QueueId(3));
                            }
                            prop_assert!(c.get(c.len()).is_none());
                            model.held.push((t, want));
                        }
                        None => prop_assert!(got.is_none()),
                    }
                }
                Op::Release(i) => {
                    if !model.held.is_empty() {
                        let (t, seqs) = model.held.swap_remove(i % model.held.len());
                        prop_assert_eq!(work.recycle_raw(t), Ok(()));
                        model.delivered += seqs.len() as u64;
                        // Releasing it again is a double recycle.
                        prop_assert!(work.recycle_raw(t).is_err());
                        model.bad += 1;
                    }
                }
                Op::BadRecycle(kind) => {
                    let probe = model.held.first().map(|(t, _)| *t)
                        .unwrap_or(ChunkToken { pool: cap.pool.uid, index: 0, generation: 0 });
                    let bad = match kind {
                        0 => ChunkToken { pool: probe.pool.wrapping_add(1000), ..probe },
                        1 => ChunkToken { generation: probe.generation.wrapping_add(1), ..probe },
                        2 => ChunkToken { index: 99, ..probe },
                        // A chunk that is not held: the token of a chunk we never took.
                        _ => ChunkToken { index: (0..r as u32).find(|i| !model.held.iter().any(|(t, _)| t.index == *i)).unwrap_or(0), ..probe },
                    };
                    let held_it = model.held.iter().any(|(t, _)| *t == bad);
                    if !held_it {
                        prop_assert!(work.recycle_raw(bad).is_err(), "bad token {:?} accepted", bad);
                        model.bad += 1;
                    }
                }
            }
            let s = counters.read();
            prop_assert!(s.balanced(), "identity broken: {:?}", s);
            prop_assert_eq!(s.delivered, model.delivered);
            prop_assert_eq!(s.bad_recycles, model.bad);
            let census = state_census(&cap.pool);
            prop_assert_eq!(census[ChunkState::Attached as usize], usize::from(!model.attached.is_empty()));
            prop_assert_eq!(census[ChunkState::Captured as usize], model.published.len());
            prop_assert_eq!(census[ChunkState::Delivering as usize], model.held.len());
        }
        for (t, seqs) in std::mem::take(&mut model.held) {
            work.recycle_raw(t).unwrap();
            model.delivered += seqs.len() as u64;
        }
        cap.flush();
        while let Some(c) = work.try_next() {
            model.delivered += c.len() as u64;
        }
        let s = counters.read();
        prop_assert_eq!(s.received, model.pushed + model.dropped);
        prop_assert_eq!(s.capture_drops, model.dropped);
        prop_assert_eq!(s.delivered, model.pushed);
        prop_assert_eq!(s.in_flight, 0);
        prop_assert!(s.balanced());
        prop_assert_eq!(state_census(&cap.pool)[ChunkState::Free as usize], r);
    }
}

#[test]
fn raw_recycle_refuses_double_foreign_stale_and_out_of_range() {
    let (mut cap, mut work, counters) = pair(4, 3);
    let (_c2, mut other, _) = pair(4, 3);
    for i in 0..4 {
        cap.push_copy(&packet(i, 64), 64, 0).unwrap();
    }
    cap.flush();
    let t = work.take_raw().expect("a published chunk");
    assert_eq!(work.raw_chunk(t).unwrap().len(), 4);
    assert_eq!(seq_of(&work.raw_chunk(t).unwrap().get(2).unwrap()), 2);

    let cases = [
        ("foreign", ChunkToken { pool: t.pool + 7, ..t }, RecycleError::Foreign),
        ("out of range", ChunkToken { index: 3, ..t }, RecycleError::OutOfRange(3)),
        ("stale", ChunkToken { generation: t.generation + 1, ..t }, RecycleError::Stale { token: t.generation + 1, current: t.generation }),
        ("never handed out", ChunkToken { index: 1, ..t }, RecycleError::NotHeld(ChunkState::Free)),
    ];
    for (what, token, want) in cases {
        assert_eq!(work.recycle_raw(token), Err(want), "{what}");
    }
    assert_eq!(other.recycle_raw(t), Err(RecycleError::Foreign), "another pool's worker");
    assert_eq!(counters.read().bad_recycles, 4);

    work.recycle_raw(t).unwrap();
    assert_eq!(work.recycle_raw(t), Err(RecycleError::NotHeld(ChunkState::Free)), "double recycle");
    assert_eq!(counters.read().bad_recycles, 5);

    // The refused recycles changed nothing: the chunk came back exactly once, and
    // the pool still hands out all three chunks.
    assert_eq!(cap.free_chunks(), 3);
    for i in 0..12 {
        cap.push_copy(&packet(i, 64), 64, 0).unwrap();
    }
    assert_eq!(cap.push_copy(&packet(99, 64), 64, 0), Err(NoCell), "three chunks of four cells");
    let s = counters.read();
    assert!(s.balanced());
    assert_eq!(s.delivered, 4);
}

#[test]
fn stale_token_from_an_earlier_hand_out_is_refused() {
    let (mut cap, mut work, _) = pair(1, 2);
    cap.push_copy(&packet(0, 64), 64, 0).unwrap();
    cap.flush();
    let first = work.take_raw().unwrap();
    work.recycle_raw(first).unwrap();
    // The same chunk comes round again (LIFO free list) at the next generation.
    cap.push_copy(&packet(1, 64), 64, 0).unwrap();
    cap.flush();
    let second = work.take_raw().unwrap();
    assert_eq!(second.index, first.index);
    assert_eq!(second.generation, first.generation + 1);
    assert!(matches!(work.recycle_raw(first), Err(RecycleError::Stale { .. })));
    assert_eq!(seq_of(&work.raw_chunk(second).unwrap().get(0).unwrap()), 1, "the stale recycle did not free it");
    work.recycle_raw(second).unwrap();
}

#[test]
#[cfg_attr(miri, ignore = "copies 768 KiB byte by byte under Miri")]
fn arena_fills_before_cells() {
    let (mut cap, work, _) = pair(256, 2);
    let big = MAX_CAPLEN;
    // 512 KiB arena: two largest packets per chunk.
    for i in 0..2 {
        cap.push_copy(&packet(i, big), big as u32, 0).unwrap();
    }
    cap.push_copy(&packet(2, big), big as u32, 0).unwrap();
    let c = work.try_next().expect("first chunk published when its arena filled");
    assert_eq!(c.len(), 2);
    assert!(c.packets().all(|p| p.caplen() as usize == big));
}

#[test]
fn capture_and_worker_on_two_threads() {
    let n: u32 = if cfg!(miri) { 300 } else { 300_000 };
    let (mut cap, work, counters) = pair(8, 4);
    let producer = std::thread::spawn(move || {
        for i in 0..n {
            let p = packet(i, 60 + (i as usize % 1400));
            while cap.push_copy(&p, p.len() as u32, u64::from(i)).is_err() {
                cap.wait_for_cell(Duration::from_millis(20));
            }
        }
        // Dropping the capture side flushes and closes the capture queue.
    });
    let mut expect = 0u32;
    loop {
        match work.next(Duration::from_millis(50)) {
            Next::Chunk(c) => {
                for p in c.packets() {
                    assert_eq!(seq_of(&p), expect);
                    assert_eq!(p.caplen() as usize, 60 + (expect as usize % 1400));
                    expect += 1;
                }
                assert!(counters.read().balanced());
            }
            Next::Idle => continue,
            Next::Closed => break,
        }
    }
    producer.join().unwrap();
    assert_eq!(expect, n);
    let s = counters.read();
    assert_eq!((s.received, s.delivered, s.in_flight), (u64::from(n), u64::from(n), 0));
}

/// A capture side that waits for a batch of chunks back is still woken by
/// a worker that goes idle with fewer: an application holding the rest
/// must not leave it asleep until its timeout.
#[test]
fn a_worker_going_idle_wakes_a_capture_side_waiting_for_a_batch() {
    let (mut cap, mut work, _) = pair(4, 16);
    cap.refill_in_batches_of(4);
    for i in 0..64 {
        cap.push_copy(&packet(i, 60), 60, 0).unwrap();
    }
    assert_eq!(cap.push_copy(&packet(64, 60), 60, 0), Err(NoCell), "every chunk is in use");
    cap.flush();
    let worker = std::thread::spawn(move || {
        let held: Vec<ChunkToken> = (0..16).map(|_| work.take_raw().expect("16 chunks published")).collect();
        // Let the capture side fall asleep first, then hand back two: below its batch.
        std::thread::sleep(Duration::from_millis(200));
        for t in &held[..2] {
            work.recycle_raw(*t).unwrap();
        }
        assert!(matches!(work.next(Duration::from_secs(3)), Next::Idle));
        for t in &held[2..] {
            work.recycle_raw(*t).unwrap();
        }
        work
    });
    let start = std::time::Instant::now();
    assert!(cap.wait_for_cell(Duration::from_secs(20)));
    let took = start.elapsed();
    let _work = worker.join().unwrap();
    assert!(took < Duration::from_millis(2500), "the capture side slept {took:?}: the idle worker did not wake it");
}

#[test]
fn referenced_blocks_stay_held_until_their_chunks_come_back() {
    let (mut cap, work, counters) = pair(8, 4);
    let arena = BlockArena::new(256, 6).unwrap();
    let mut blocks = Vec::new();
    for b in 0..5u8 {
        let mut m = arena.acquire().unwrap();
        m.bytes().fill(b);
        blocks.push(m.freeze());
    }
    // Two packets from block 0, one from each of blocks 1 to 4: the fifth distinct
    // block does not fit the first chunk's list, so that chunk is published.
    cap.push_ref(&blocks[0], 0..10, 10, 0).unwrap();
    cap.push_ref(&blocks[0], 100..150, 60, 1).unwrap();
    for b in &blocks[1..] {
        cap.push_ref(b, 5..25, 20, 2).unwrap();
    }
    let first = work.try_next().expect("published when its block list was full");
    assert_eq!(first.len(), 5);
    let bytes: Vec<(u8, usize)> = first.packets().map(|p| (p.data()[0], p.data().len())).collect();
    assert_eq!(bytes, [(0, 10), (0, 50), (1, 20), (2, 20), (3, 20)]);
    assert_eq!(first.get(1).unwrap().wire_len(), 60);

    // The unit lets go of its own holds; the chunks' holds remain.
    drop(blocks);
    assert_eq!(arena.free_blocks(), 1, "only the never-used block is free");
    drop(first);
    cap.reclaim();
    assert_eq!(arena.free_blocks(), 5, "blocks 0-3 came back with the first chunk");
    cap.flush();
    let second = work.try_next().unwrap();
    assert_eq!(second.get(0).unwrap().data(), &[4u8; 20][..]);
    drop(second);
    cap.reclaim();
    assert_eq!(arena.free_blocks(), 6);
    let s = counters.read();
    assert_eq!((s.received, s.delivered, s.in_flight), (6, 6, 0));
}

#[test]
#[should_panic(expected = "outside the block")]
fn a_cell_cannot_point_outside_its_block() {
    let (mut cap, _work, _) = pair(8, 4);
    let arena = BlockArena::new(256, 1).unwrap();
    let b = arena.acquire().unwrap().freeze();
    let _ = cap.push_ref(&b, 200..300, 100, 0);
}

#[test]
fn frames_come_back_when_their_chunk_is_recycled() {
    let (mut cap, work, _) = pair(2, 4);
    let umem = FrameArena::new(8, 2048).unwrap();
    // The kernel wrote three packets at frame offsets 256 of frames 1, 5 and 2.
    for (frame, len) in [(1u64, 60usize), (5, 1500), (2, 64)] {
        cap.push_frame(&umem, frame * 2048 + 256, len, len as u32, 0).unwrap();
    }
    let mut back = Vec::new();
    cap.take_frames(&mut back);
    assert!(back.is_empty(), "nothing recycled yet");
    let c = work.try_next().expect("first chunk (2 cells) published");
    assert_eq!(c.get(1).unwrap().caplen(), 1500);
    drop(c);
    cap.take_frames(&mut back);
    assert_eq!(back.iter().map(|&a| umem.frame_of(a)).collect::<Vec<_>>(), [2048, 5 * 2048]);
    cap.flush();
    drop(work.try_next());
    cap.take_frames(&mut back);
    assert_eq!(back.len(), 3);
}

#[test]
fn a_shared_block_goes_back_only_when_unheld() {
    let (mut cap, work, _) = pair(8, 4);
    let region = crate::sys::mem::Region::new(4 * 1024).unwrap();
    // SAFETY: anonymous memory stands in for the kernel's ring; nothing else writes it.
    let ring = unsafe { BlockArena::over_mapping(region, 1024, 4) };
    assert!(ring.acquire().is_none(), "the kernel owns unheld blocks");
    let b = ring.adopt(2).unwrap();
    assert!(ring.adopt(2).is_none(), "adopted twice");
    cap.push_ref(&b, 0..100, 100, 0).unwrap();
    drop(b);
    assert!(!ring.is_unheld(2), "a chunk still points into block 2");
    cap.flush();
    drop(work.try_next());
    cap.reclaim();
    assert!(ring.is_unheld(2));
}

/// Two queues in a buddy group offloading above 50%.
fn group(m: usize, r: usize) -> (Vec<CaptureSide>, Vec<WorkerSide>, Vec<Arc<QueueCounters>>) {
    let cfg = PoolConfig::new(m, r).unwrap();
    let counters: Vec<_> = (0..2).map(|q| Arc::new(QueueCounters::new(QueueId(q)))).collect();
    let (mut caps, mut works): (Vec<_>, Vec<_>) =
        counters.iter().enumerate().map(|(q, c)| work_queue_pair(QueueId(q as u16), &cfg, Arc::clone(c), None).unwrap()).unzip();
    link_buddies(&mut caps, &mut works, OffloadThreshold::new(50).unwrap());
    (caps, works, counters)
}

#[test]
fn offloaded_chunks_are_read_by_the_buddy_and_return_to_their_pool() {
    let (mut caps, works, counters) = group(2, 4);
    // Queue 0 publishes 4 chunks while nobody reads: above half full, the later ones go to worker 1.
    for seq in 0..8 {
        caps[0].push_copy(&packet(seq, 60), 60, u64::from(seq)).unwrap();
        if caps[0].attached_packets() == 2 {
            caps[0].flush();
        }
    }
    let own = works[0].backlog();
    let offloaded = works[1].backlog();
    assert_eq!(own + offloaded, 4);
    assert!(offloaded > 0, "nothing offloaded");
    // Worker 1 reads queue 0's packets in place and recycles them to queue 0's pool.
    let mut seen = Vec::new();
    while let Some(c) = works[1].try_next() {
        assert_eq!(c.queue(), QueueId(0), "the chunk keeps its origin");
        seen.extend(c.packets().map(|p| seq_of(&p)));
    }
    while let Some(c) = works[0].try_next() {
        seen.extend(c.packets().map(|p| seq_of(&p)));
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..8).collect::<Vec<_>>());
    assert_eq!(caps[0].free_chunks(), 4, "every chunk came back to queue 0's free list");
    let s = counters[0].read();
    assert_eq!((s.received, s.delivered, s.in_flight), (8, 8, 0));
    assert_eq!(s.offloaded, offloaded as u64 * 2);
    assert!(s.balanced());
    assert_eq!(counters[1].read().delivered, 0, "deliveries count for the queue that captured");
}

#[test]
fn offloaded_chunks_recycle_by_token_too() {
    let (mut caps, mut works, _) = group(1, 3);
    for seq in 1..=3 {
        caps[0].push_copy(&packet(seq, 60), 60, 1).unwrap();
        caps[0].flush();
    }
    let t = works[1].take_raw().expect("the third chunk (queue 0 two thirds full) was offloaded to worker 1");
    assert_eq!(seq_of(&works[1].raw_chunk(t).unwrap().get(0).unwrap()), 3);
    assert_eq!(works[0].recycle_raw(t), Err(RecycleError::OtherWorker), "worker 0 does not hold it");
    assert!(works[0].raw_chunk(t).is_err());
    works[1].recycle_raw(t).unwrap();
    assert_eq!(works[1].recycle_raw(t), Err(RecycleError::NotHeld(ChunkState::Free)));
}

#[test]
fn a_fence_passes_once_every_chunk_before_it_is_recycled() {
    let (mut c, w, _) = pair(4, 8);
    for seq in 0..6 {
        c.push_copy(&packet(seq, 60), 60, 0).unwrap();
    }
    let fence = c.fence();
    assert_eq!(fence.len(), 2, "a full chunk and the attached one, published by the fence");
    c.push_copy(&packet(6, 60), 60, 0).unwrap();
    assert!(!c.passed(&fence));
    let first = w.try_next().unwrap();
    drop(first);
    assert!(!c.passed(&fence), "one fenced chunk is still waiting");
    c.flush();
    drop(w.try_next().unwrap());
    assert!(c.passed(&fence), "both fenced chunks recycled; the later chunk does not matter");
}

proptest! {
    /// Keys computed on the capture side (trailing their packets by KEY_LAG, the
    /// last ones when the chunk is published) are the keys of the packets, for
    /// chunks published full or by a flush.
    #[test]
    fn capture_side_keys_are_the_packets_keys(
        m in 1usize..40,
        frames in proptest::collection::vec((any::<u16>(), any::<u16>(), prop_oneof![Just(6u8), Just(17), Just(1)], 0usize..60), 1..100),
        flush_every in 1usize..50,
    ) {
        let counters = Arc::new(QueueCounters::new(QueueId(0)));
        // Every chunk is taken and recycled as soon as it is published: two are enough.
        let cfg = PoolConfig::new(m, 2).unwrap();
        let (mut cap, work) = work_queue_pair(QueueId(0), &cfg, counters, Some(LinkType::ETHERNET)).unwrap();
        let mut want = Vec::new();
        let mut got = Vec::new();
        let take = |work: &WorkerSide, got: &mut Vec<Option<u16>>| {
            while let Some(c) = work.try_next() {
                let mut keys = Vec::new();
                c.for_each_sort_key(LinkType::ETHERNET, |i, k| keys.push((i, k)));
                prop_assert_eq!(keys.iter().map(|&(i, _)| i as usize).collect::<Vec<_>>(), (0..c.len()).collect::<Vec<_>>());
                got.extend(keys.into_iter().map(|(_, k)| k));
            }
            Ok(())
        };
        for (n, &(sport, dport, proto, cut)) in frames.iter().enumerate() {
            let mut f = vec![0u8; 14 + 20 + 8];
            f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            f[14] = 0x45;
            f[23] = proto;
            f[34..36].copy_from_slice(&sport.to_be_bytes());
            f[36..38].copy_from_slice(&dport.to_be_bytes());
            f.truncate(f.len() - cut.min(f.len()));
            want.push(crate::wire::sort_key(LinkType::ETHERNET, &f));
            cap.push_copy(&f, f.len() as u32, n as u64).unwrap();
            if n % flush_every == flush_every - 1 {
                cap.flush();
            }
            take(&work, &mut got)?;
        }
        cap.flush();
        take(&work, &mut got)?;
        prop_assert_eq!(got, want);
    }
}

/// A stage that holds chunks on purpose must learn at once that its source
/// waits for them: `next_unless_starved` wakes on the mark, `next` does not
/// care, and the mark is consumed once.
#[test]
fn a_starved_capture_side_wakes_a_worker_watching_for_it() {
    let (mut cap, w, _) = pair(4, 2);
    for seq in 0..8 {
        cap.push_copy(&packet(seq, 64), 64, 0).unwrap();
    }
    cap.flush();
    let a = w.try_next().unwrap();
    let b = w.try_next().unwrap();
    assert!(!cap.has_cell(), "both chunks are held");
    assert!(!w.take_starved());
    let waiter = std::thread::spawn(move || {
        // Nothing recycles, so this waits its whole timeout having marked the side.
        cap.wait_recycled(Duration::from_millis(200));
        cap
    });
    let t = std::time::Instant::now();
    assert!(matches!(w.next_unless_starved(Duration::from_secs(60)), Next::Idle));
    assert!(t.elapsed() < Duration::from_secs(30), "woke only at its timeout: the mark did not ring");
    assert!(w.take_starved());
    assert!(!w.take_starved(), "the mark is consumed once");
    let cap = waiter.join().unwrap();
    drop((a, b));
    drop(cap);
    assert!(matches!(w.next(Duration::from_secs(1)), Next::Closed));
}

#[test]
fn words_start_as_zeros_and_keep_what_is_written() {
    let mut w = crate::sys::mem::Words::zeroed(1000).unwrap();
    assert_eq!(w.len(), 1000);
    assert!(w.iter().all(|&x| x == 0));
    (w[0], w[999]) = (u64::MAX, 7);
    assert_eq!((w[0], w[1], w[999]), (u64::MAX, 0, 7));
    assert!(crate::sys::mem::Words::zeroed(0).unwrap().is_empty());
}
