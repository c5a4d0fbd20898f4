-- weir's flow records from Kafka into ClickHouse (the goflow2 -> Kafka ->
-- ClickHouse stack). NOT RUN HERE: no ClickHouse server runs in weir's test
-- bed; this is written from ClickHouse's documentation of the Kafka table
-- engine and the Protobuf format, and must be tried before it is relied on.
--
-- The sensors publish protobuf records (schema/weir.proto) into one topic:
--   [kafka] brokers = "kafka1:9092"  topic = "weir-{type}"  kafka-format = "protobuf"
--   (or: weir flows eth1 --kafka kafka1:9092 --kafka-format protobuf)
-- Copy schema/weir.proto into ClickHouse's format_schemas directory
-- (format_schema_path in its server config, /var/lib/clickhouse/format_schemas/).
--
-- Each Kafka message is one Record, preceded by its length as a varint: the
-- `Protobuf` format (length-delimited), not `ProtobufSingle`. ClickHouse
-- matches a nested message's fields to columns named `flow_<field>` (or
-- `flow.<field>`); a stream, alert or stats record leaves them at their
-- defaults, and the view keeps only `flow` records.

CREATE DATABASE IF NOT EXISTS weir;

-- The consumer: reads the topic, one row per record, nothing stored here.
CREATE TABLE weir.flows_queue
(
    timestamp_ns        UInt64,
    event_type          String,
    community_id        String,
    flow_id             UInt64,
    src_ip              String,      -- 4 or 16 bytes
    dest_ip             String,
    src_port            Nullable(UInt32),
    dest_port           Nullable(UInt32),
    icmp_type           Nullable(UInt32),
    icmp_code           Nullable(UInt32),
    proto               UInt32,
    flow_pkts_toserver  UInt64,
    flow_pkts_toclient  UInt64,
    flow_bytes_toserver UInt64,
    flow_bytes_toclient UInt64,
    flow_start_ns       UInt64,
    flow_end_ns         UInt64,
    flow_reason         String,
    flow_tcp_flags_ts   UInt32,
    flow_tcp_flags_tc   UInt32,
    flow_ingress        UInt32
)
ENGINE = Kafka
SETTINGS kafka_broker_list = 'kafka1:9092',
         kafka_topic_list = 'weir-flow',
         kafka_group_name = 'clickhouse-weir-flows',
         kafka_format = 'Protobuf',
         kafka_schema = 'weir.proto:Record',
         kafka_num_consumers = 1;

-- Where the records are kept: by day, ordered for queries by time and host.
CREATE TABLE weir.flows
(
    time          DateTime64(9, 'UTC'),
    start         DateTime64(9, 'UTC'),
    community_id  LowCardinality(String),
    src_ip        IPv6,
    dest_ip       IPv6,
    src_port      UInt16,
    dest_port     UInt16,
    proto         UInt8,
    pkts_toserver UInt64,
    pkts_toclient UInt64,
    bytes_toserver UInt64,
    bytes_toclient UInt64,
    tcp_flags_ts  UInt8,
    tcp_flags_tc  UInt8,
    reason        LowCardinality(String),
    ingress       UInt32
)
ENGINE = MergeTree
PARTITION BY toDate(time)
ORDER BY (time, src_ip, dest_ip);

-- Moves each flow record from the queue into the table: addresses as IPv6
-- (IPv4 mapped), ICMP's type and code in the ports, as IPFIX carries them.
CREATE MATERIALIZED VIEW weir.flows_mv TO weir.flows AS
SELECT
    fromUnixTimestamp64Nano(toInt64(timestamp_ns))   AS time,
    fromUnixTimestamp64Nano(toInt64(flow_start_ns))  AS start,
    community_id,
    if(length(src_ip) = 4, IPv4ToIPv6(reinterpretAsUInt32(reverse(src_ip))), toIPv6(src_ip))   AS src_ip,
    if(length(dest_ip) = 4, IPv4ToIPv6(reinterpretAsUInt32(reverse(dest_ip))), toIPv6(dest_ip)) AS dest_ip,
    toUInt16(coalesce(src_port, 0))                                     AS src_port,
    toUInt16(coalesce(dest_port, bitShiftLeft(coalesce(icmp_type, 0), 8) + coalesce(icmp_code, 0))) AS dest_port,
    toUInt8(proto)                                                      AS proto,
    flow_pkts_toserver   AS pkts_toserver,
    flow_pkts_toclient   AS pkts_toclient,
    flow_bytes_toserver  AS bytes_toserver,
    flow_bytes_toclient  AS bytes_toclient,
    toUInt8(flow_tcp_flags_ts) AS tcp_flags_ts,
    toUInt8(flow_tcp_flags_tc) AS tcp_flags_tc,
    flow_reason          AS reason,
    flow_ingress         AS ingress
FROM weir.flows_queue
WHERE event_type = 'flow';

-- The fleet's top talkers of the last hour, joined by Community ID (both
-- directions, any sensor):
--   SELECT community_id, any(src_ip), any(dest_ip), sum(bytes_toserver + bytes_toclient) AS bytes
--   FROM weir.flows WHERE time > now() - INTERVAL 1 HOUR
--   GROUP BY community_id ORDER BY bytes DESC LIMIT 10;
