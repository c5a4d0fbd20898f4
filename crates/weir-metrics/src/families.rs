//! The metric families of one scrape, gathered by name, encoded in the text
//! format by the `prometheus` crate.

use crate::catalogue::{Def, Kind};
use prometheus::proto::{Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::{Encoder, TextEncoder};
use std::collections::HashMap;

/// The metrics of one scrape: every sample of a name in one family, which
/// the format wants once (one `# HELP` and `# TYPE`, then its samples).
#[derive(Default)]
pub struct Families {
    list: Vec<MetricFamily>,
    by_name: HashMap<&'static str, usize>,
}

/// Label names and values of one sample.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

impl Families {
    fn family(&mut self, def: &Def) -> &mut MetricFamily {
        let i = *self.by_name.entry(def.name).or_insert_with(|| {
            let mut f = MetricFamily::default();
            f.set_name(def.name.to_string());
            f.set_help(def.help.to_string());
            f.set_field_type(match def.kind {
                Kind::Counter => MetricType::COUNTER,
                Kind::Gauge => MetricType::GAUGE,
                Kind::Histogram => MetricType::HISTOGRAM,
            });
            self.list.push(f);
            self.list.len() - 1
        });
        &mut self.list[i]
    }

    fn push(&mut self, def: &Def, labels: Labels<'_>, fill: impl FnOnce(&mut Metric)) {
        let mut m = Metric::default();
        m.set_label(
            labels
                .iter()
                .map(|(k, v)| {
                    let mut l = LabelPair::default();
                    l.set_name((*k).to_string());
                    l.set_value((*v).to_string());
                    l
                })
                .collect(),
        );
        fill(&mut m);
        self.family(def).mut_metric().push(m);
    }

    /// A counter's sample.
    pub fn counter(&mut self, def: &Def, labels: Labels<'_>, value: f64) {
        debug_assert_eq!(def.kind, Kind::Counter, "{}", def.name);
        self.push(def, labels, |m| {
            let mut c = Counter::default();
            c.set_value(value);
            m.set_counter(c);
        });
    }

    /// A gauge's sample.
    pub fn gauge(&mut self, def: &Def, labels: Labels<'_>, value: f64) {
        debug_assert_eq!(def.kind, Kind::Gauge, "{}", def.name);
        self.push(def, labels, |m| {
            let mut g = Gauge::default();
            g.set_value(value);
            m.set_gauge(g);
        });
    }

    /// A histogram's sample: `counts[i]` observations at most `bounds[i]`
    /// and above the bound before (not cumulative); any count past the bounds
    /// is above them all. `sum` is the sum of the observations.
    pub fn histogram(&mut self, def: &Def, labels: Labels<'_>, bounds: &[f64], counts: &[u64], sum: f64) {
        debug_assert_eq!(def.kind, Kind::Histogram, "{}", def.name);
        let mut cumulative = 0;
        let buckets = bounds
            .iter()
            .zip(counts)
            .map(|(&bound, &n)| {
                cumulative += n;
                let mut b = Bucket::default();
                b.set_upper_bound(bound);
                b.set_cumulative_count(cumulative);
                b
            })
            .collect();
        let total: u64 = counts.iter().sum();
        self.push(def, labels, |m| {
            let mut h = Histogram::default();
            h.set_bucket(buckets);
            h.set_sample_count(total);
            h.set_sample_sum(sum);
            m.set_histogram(h);
        });
    }

    /// The text exposition format of every family, in the order first added.
    pub fn encode(&self) -> String {
        let mut out = Vec::new();
        // Every family has a name and at least one sample, all the encoder checks.
        if let Err(e) = TextEncoder::new().encode(&self.list, &mut out) {
            return format!("# weir: the metrics could not be encoded: {e}\n");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}
