//! Comparing the sensor's outputs with the single-purpose commands'
//! (`sensor.rs`, `sensor_live.rs`): stream files, flow events and alerts.

// Each test crate that includes this module uses a part of it.
#![allow(dead_code)]

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Every line of a JSON-lines file, parsed (none if the file is missing).
pub fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The events of one type.
pub fn of_type(events: &[Value], t: &str) -> Vec<Value> {
    events.iter().filter(|e| e["event_type"] == t).cloned().collect()
}

/// Every file under `dir`, by name, with its bytes.
pub fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect()
}

/// The sensor's flow events and `weir flows --events`' file, each sorted.
pub fn flow_events(events: &[Value], flows: &Path) -> (Vec<String>, Vec<String>) {
    let mut mine: Vec<String> = of_type(events, "flow").iter().map(Value::to_string).collect();
    let mut theirs: Vec<String> = json_lines(flows).iter().map(Value::to_string).collect();
    mine.sort();
    theirs.sort();
    (mine, theirs)
}

/// The sensor's alert events and `weir inspect --streams -o`' alerts, each
/// as (community_id, direction, offset, rule), sorted.
pub fn alerts(events: &[Value], inspect: &Path) -> (Vec<String>, Vec<String>) {
    let key = |cid: &Value, dir: &str, offset: &Value, rule: &Value| format!("{cid} {dir} {offset} {rule}");
    let mut mine: Vec<String> = of_type(events, "alert")
        .iter()
        .map(|e| {
            let dir = if e["alert"]["direction"] == "toserver" { "initiator" } else { "responder" };
            key(&e["community_id"], dir, &e["alert"]["offset"], &e["alert"]["signature_id"])
        })
        .collect();
    let mut theirs: Vec<String> =
        json_lines(inspect).iter().map(|a| key(&a["community_id"], a["direction"].as_str().unwrap(), &a["offset"], &a["alert"])).collect();
    mine.sort();
    theirs.sort();
    (mine, theirs)
}
