//! One metric family written from samples read at scrape time (no registry of live metrics).

use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

/// A sample's labels, as (name, value) pairs.
pub(super) type Labels<'a> = Vec<(&'static str, &'a str)>;

/// Writes one metric family: a descriptor, then one sample per label set.
pub(super) fn family<'a, V: Copy>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: impl IntoIterator<Item = (Labels<'a>, V)>,
) -> fmt::Result
where
    ConstCounter<V>: EncodeMetric,
    ConstGauge<V>: EncodeMetric,
{
    let mut metric = enc.encode_descriptor(name, help, None, kind)?;
    for (labels, v) in samples {
        let sample = metric.encode_family(&labels)?;
        match kind {
            MetricType::Counter => ConstCounter::new(v).encode(sample)?,
            _ => ConstGauge::new(v).encode(sample)?,
        }
    }
    Ok(())
}
