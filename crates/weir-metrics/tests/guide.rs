//! The user guide's Metrics chapter (docs/src/metrics.md) lists every metric
//! of the catalogue, with its type, and no metric weir does not serve.

use weir_metrics::catalogue::{Kind, When, ALL};

fn chapter() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/src/metrics.md");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(text.starts_with("# Metrics\n"), "{path} is not the Metrics chapter");
    text
}

#[test]
fn the_guide_lists_every_metric_with_its_type_labels_and_when() {
    let s = chapter();
    for d in ALL {
        let kind = match d.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let labels = if d.labels.is_empty() { "-".to_string() } else { d.labels.join(", ") };
        let when = match d.when {
            When::Always => "always",
            When::Engine => "engine",
            When::Locality => "`--locality`",
            When::Rebalance => "`--balance rebalance`",
            When::Streams => "stream layer",
            When::Forward => "`weir forward`",
            When::Sensor => "`weir sensor`",
            When::Kafka => "`--kafka`, `[kafka]`",
        };
        let row = format!("| `{}` | {kind} | {labels} | {when} | {} |", d.name, d.help);
        assert!(s.contains(&row), "the Metrics chapter's table has no row\n{row}");
    }
}

#[test]
fn the_guide_names_no_metric_weir_does_not_serve() {
    let s = chapter();
    let known: Vec<&str> = ALL.iter().map(|d| d.name).collect();
    for word in s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        let metric = (word.starts_with("weir_") || word.starts_with("process_")) && word.len() > 8;
        if metric {
            let family = ["_bucket", "_sum", "_count"].iter().find_map(|x| word.strip_suffix(x)).unwrap_or(word);
            assert!(known.contains(&word) || known.contains(&family), "the Metrics chapter names {word}, which weir does not serve");
        }
    }
}
