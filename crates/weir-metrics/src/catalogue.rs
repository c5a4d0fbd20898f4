//! Every metric weir serves: its name, type and help text, once. The list
//! in the user guide's Metrics chapter (docs/src/metrics.md, by
//! tests/guide.rs) and the examples' dashboard are checked against [`ALL`].

/// A metric's type in the exposition format.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only grows (from the start of the process).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations counted into buckets.
    Histogram,
}

/// One metric.
#[derive(Copy, Clone, Debug)]
pub struct Def {
    /// Its name, as served.
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// Its `# HELP` text.
    pub help: &'static str,
    /// Its labels besides those every sample of its group has (`queue` and
    /// `source` for the engine's, `lane` for forward's).
    pub labels: &'static [&'static str],
    /// When it is served.
    pub when: When,
}

/// When a metric is served.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum When {
    /// Always.
    Always,
    /// By commands that run the engine.
    Engine,
    /// With locality buffering (`--locality`, `WEIR_LOCALITY`).
    Locality,
    /// With `--balance rebalance`.
    Rebalance,
    /// By the commands on the stream layer (`streams`, `flows`, `inspect --streams`).
    Streams,
    /// By `weir forward`.
    Forward,
    /// By `weir sensor`.
    Sensor,
    /// With a Kafka output (`--kafka`, the sensor's `[kafka]`).
    Kafka,
}

macro_rules! defs {
    ($($id:ident = $name:literal, $kind:ident, $when:ident, [$($label:literal),*], $help:literal;)*) => {
        $(
            #[doc = $help]
            pub const $id: Def = Def { name: $name, kind: Kind::$kind, help: $help, labels: &[$($label),*], when: When::$when };
        )*
        /// Every metric, in the order a scrape serves them.
        pub const ALL: &[Def] = &[$($id),*];
    };
}

defs! {
    BUILD_INFO = "weir_build_info", Gauge, Always, ["version"],
        "Always 1; the version of weir serving these metrics.";
    RECEIVED = "weir_packets_received_total", Counter, Engine, [],
        "Packets the source saw on the queue. Each ends in exactly one of delivered, filtered, dropped, unread or in flight.";
    DELIVERED = "weir_packets_delivered_total", Counter, Engine, [],
        "Packets handed to the application.";
    FILTERED = "weir_packets_filtered_total", Counter, Engine, [],
        "Packets the filter rejected (an afpacket source filters in the kernel: what it rejects is never received).";
    DROPPED = "weir_packets_dropped_total", Counter, Engine, ["category"],
        "Packets lost: category capture (no free cell in the pool when the packet came) or delivery (lost in the kernel's ring before weir read it).";
    UNREAD = "weir_packets_unread_total", Counter, Engine, [],
        "Packets captured, then released unread because the application stopped reading.";
    IN_FLIGHT = "weir_packets_in_flight", Gauge, Engine, [],
        "Packets captured and not yet released by the worker.";
    OFFLOADED = "weir_packets_offloaded_total", Counter, Engine, [],
        "Packets handed to a buddy queue's worker by offloading (still counted in their own queue).";
    RECEIVED_BYTES = "weir_received_bytes_total", Counter, Engine, [],
        "Wire bytes of the packets received.";
    DELIVERED_BYTES = "weir_delivered_bytes_total", Counter, Engine, [],
        "Wire bytes of the packets delivered.";
    BAD_RECYCLES = "weir_bad_recycles_total", Counter, Engine, [],
        "Chunk recycles refused because the chunk was not held, not the queue's, or stale.";
    POOL_CHUNKS = "weir_pool_chunks", Gauge, Engine, [],
        "Chunks in the queue's pool (R of --pool M,R).";
    POOL_CHUNKS_IN_USE = "weir_pool_chunks_in_use", Gauge, Engine, [],
        "Chunks of the queue's pool not free: being filled, waiting for the worker, or being delivered.";
    POOL_CELLS_PER_CHUNK = "weir_pool_cells_per_chunk", Gauge, Engine, [],
        "Packet cells in each chunk (M of --pool M,R).";
    LOCALITY_BATCH = "weir_locality_batch_packets", Histogram, Locality, ["le"],
        "Packets in each locality batch delivered (queue=\"all\" for one reader of every queue, as libpcap's).";
    REBALANCE_MOVES = "weir_rebalance_moves_started_total", Counter, Rebalance, [],
        "Bucket moves decided by the rebalancing controller.";
    REBALANCE_BUCKETS = "weir_rebalance_buckets_moved_total", Counter, Rebalance, [],
        "Flow buckets moved to another queue.";
    REBALANCE_PARKED = "weir_rebalance_packets_parked_total", Counter, Rebalance, [],
        "Packets held back while their bucket moved.";
    REBALANCE_DROPPED = "weir_rebalance_packets_dropped_total", Counter, Rebalance, ["category"],
        "Packets of a moving bucket lost: category park (the parking area was full) or handover (no cell in the new queue).";
    REBALANCE_PARKED_PEAK = "weir_rebalance_parked_peak_bytes", Gauge, Rebalance, [],
        "Most bytes held back at once while buckets moved.";
    STREAM_PACKETS = "weir_stream_packets_total", Counter, Streams, ["category"],
        "Packets that reached the stream layer, by where they went: stream, not_ip, malformed, fragment, untracked, past_cutoff, memory (bytes dropped for memory).";
    STREAMS_CREATED = "weir_streams_created_total", Counter, Streams, [],
        "Stream directions created.";
    STREAMS_CLOSED = "weir_streams_closed_total", Counter, Streams, ["reason"],
        "Stream directions closed, by reason: fin, rst, idle, evicted, end, reused.";
    STREAM_CONNECTIONS = "weir_stream_connections_total", Counter, Streams, [],
        "Connections created.";
    STREAM_CONNECTIONS_HANDED_IN = "weir_stream_connections_handed_in_total", Counter, Streams, [],
        "Connections taken in from another queue when rebalancing moved their bucket.";
    STREAM_CONNECTIONS_OPEN = "weir_stream_connections_open", Gauge, Streams, [],
        "Connections in the queue's stream table.";
    STREAM_CAPTURED_BYTES = "weir_stream_captured_bytes_total", Counter, Streams, [],
        "Payload bytes of closed stream records (counted as each stream closes or hands out a record).";
    STREAM_BYTES = "weir_stream_bytes_total", Counter, Streams, ["category"],
        "Bytes of closed stream records by category: delivered, gap (never seen), duplicate, past_cutoff, memory (dropped for memory), refused (not stream data).";
    STREAM_PIECES = "weir_stream_pieces_total", Counter, Streams, [],
        "Pieces of stream data delivered to the application.";
    STREAM_ACTIVE_RECORDS = "weir_stream_active_timeout_records_total", Counter, Streams, [],
        "Flow records handed out by the active timeout (the flows went on).";
    STREAM_MEMORY = "weir_stream_memory_bytes", Gauge, Streams, [],
        "Bytes of the queue's stream arena in use.";
    STREAM_MEMORY_PEAK = "weir_stream_memory_peak_bytes", Gauge, Streams, [],
        "Most bytes of the queue's stream arena in use at once.";
    STREAM_DATAGRAMS_REASSEMBLED = "weir_stream_datagrams_reassembled_total", Counter, Streams, [],
        "IP datagrams rebuilt from fragments.";
    KERNEL_INSTALLS = "weir_stream_kernel_cutoff_installs_total", Counter, Streams, ["result"],
        "Stream directions offered to the kernel cutoff's flow map: result installed, full or failed.";
    KERNEL_ENTRIES = "weir_stream_kernel_cutoff_entries", Gauge, Streams, [],
        "Entries of the queue in the kernel cutoff's flow map.";
    KERNEL_PACKETS = "weir_stream_kernel_cutoff_packets_total", Counter, Streams, [],
        "Packets the kernel dropped past their stream's cutoff, as read back from the flow map.";
    KERNEL_BYTES = "weir_stream_kernel_cutoff_bytes_total", Counter, Streams, [],
        "IP bytes of those packets.";
    FORWARD_RECEIVED = "weir_forward_packets_received_total", Counter, Forward, [],
        "Packets the lane took off its RX ring. Each ends in forwarded, filtered, dropped, tx_failed or in flight.";
    FORWARD_FORWARDED = "weir_forward_packets_forwarded_total", Counter, Forward, [],
        "Packets the output device took for sending.";
    FORWARD_FILTERED = "weir_forward_packets_filtered_total", Counter, Forward, [],
        "Packets the filter rejected (dropped by policy).";
    FORWARD_DROPPED = "weir_forward_packets_dropped_total", Counter, Forward, [],
        "Packets the application's verdict dropped.";
    FORWARD_TX_FAILED = "weir_forward_packets_tx_failed_total", Counter, Forward, [],
        "Packets the kernel or the device gave up sending.";
    FORWARD_IN_FLIGHT = "weir_forward_packets_in_flight", Gauge, Forward, [],
        "Packets handed to TX and not yet completed.";
    FORWARD_KERNEL_DROPS = "weir_forward_kernel_drops_total", Counter, Forward, [],
        "Packets the kernel lost before the lane's RX ring (not in received).";
    FORWARD_RECEIVED_BYTES = "weir_forward_received_bytes_total", Counter, Forward, [],
        "Bytes of the packets received.";
    FORWARD_FORWARDED_BYTES = "weir_forward_forwarded_bytes_total", Counter, Forward, [],
        "Bytes of the packets forwarded.";
    SENSOR_OUTPUT_PACKETS = "weir_sensor_output_packets_total", Counter, Sensor, ["output", "result"],
        "Packets the sensor's capture handed to each output (record, flows, streams), by result: passed (to the output) or filtered (turned away by the output's own filter). Per queue, passed + filtered = delivered.";
    SENSOR_RECORD_WRITTEN = "weir_sensor_record_packets_written_total", Counter, Sensor, [],
        "Packets the record output wrote to its files (of those passed to it; the rest were not written, after a write error).";
    SENSOR_EVENTS = "weir_sensor_events_total", Counter, Sensor, ["type"],
        "Events made, by type: flow, stream, alert, stats. Made = written + unwritten + pending.";
    SENSOR_EVENTS_WRITTEN = "weir_sensor_events_written_total", Counter, Sensor, [],
        "Events whose bytes the events file took.";
    SENSOR_EVENTS_UNWRITTEN = "weir_sensor_events_unwritten_total", Counter, Sensor, [],
        "Events not written: the file refused them (a full disk) until it was reopened.";
    SENSOR_EVENTS_PENDING = "weir_sensor_events_pending", Gauge, Sensor, [],
        "Events in the writer's block, not yet handed to the file.";
    SENSOR_RELOADS = "weir_sensor_reloads_total", Counter, Sensor, ["result"],
        "Reloads asked for by SIGUSR2, by result: done or refused (the running filters and rules stayed).";
    KAFKA_RECORDS = "weir_kafka_records_total", Counter, Kafka, ["type"],
        "Records made for the Kafka output, by type: flow, stream, alert, stats.";
    KAFKA_RESULTS = "weir_kafka_results_total", Counter, Kafka, ["result", "reason"],
        "What became of the Kafka output's records: acked by the broker, dropped (reason buffer-full) or failed (reason: librdkafka's error name). Made = acked + dropped + failed + in flight.";
    KAFKA_IN_FLIGHT = "weir_kafka_in_flight", Gauge, Kafka, [],
        "The Kafka output's records in librdkafka's queue or in a request, not yet acknowledged.";
    THREAD_CPU = "weir_thread_cpu_seconds_total", Counter, Always, ["thread"],
        "CPU time (user and system) of the process's running threads, by thread name (weir-capture-*, weir-worker-*, ...; threads of one name added together).";
    PROCESS_CPU = "process_cpu_seconds_total", Counter, Always, [],
        "Total user and system CPU time of the process, in seconds.";
    PROCESS_RESIDENT = "process_resident_memory_bytes", Gauge, Always, [],
        "Resident memory size in bytes.";
    PROCESS_VIRTUAL = "process_virtual_memory_bytes", Gauge, Always, [],
        "Virtual memory size in bytes.";
    PROCESS_START = "process_start_time_seconds", Gauge, Always, [],
        "Start time of the process since the Unix epoch, in seconds.";
    PROCESS_OPEN_FDS = "process_open_fds", Gauge, Always, [],
        "Open file descriptors.";
    PROCESS_MAX_FDS = "process_max_fds", Gauge, Always, [],
        "Most open file descriptors allowed (the soft limit).";
    PROCESS_THREADS = "process_threads", Gauge, Always, [],
        "Threads of the process.";
}
