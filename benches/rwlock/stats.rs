//! Percentiles of one run, and medians with spread over several runs.

use std::collections::BTreeMap;

use crate::locks::Impl;

/// The `p`-th percentile (0..=100) of `samples`, nearest rank; NaN when empty.
pub fn percentile(samples: &mut [f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// One metric of one implementation in one scenario, one value per run.
#[derive(Clone, Debug, Default)]
pub struct Metric {
    pub unit: &'static str,
    pub runs: Vec<f64>,
}

impl Metric {
    /// Values kept outside [`Results`], one per run.
    pub fn of(runs: Vec<f64>) -> Metric {
        Metric { unit: "", runs }
    }

    pub fn median(&self) -> f64 {
        percentile(&mut self.runs.clone(), 50.0)
    }

    pub fn min(&self) -> f64 {
        self.runs.iter().copied().fold(f64::INFINITY, f64::min)
    }

    pub fn max(&self) -> f64 {
        self.runs.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    }
}

/// Everything measured, keyed by (scenario, implementation, metric).
#[derive(Default)]
pub struct Results {
    pub metrics: BTreeMap<(&'static str, Impl, String), Metric>,
    /// Handoff idle gaps (ms) per implementation, all runs pooled: for the plot.
    pub handoff_gaps: BTreeMap<Impl, Vec<f64>>,
    /// Acquisitions/s per (implementation, task count), one value per run.
    pub sweep: BTreeMap<(Impl, usize), Vec<f64>>,
    /// Per (scenario, implementation), one list per run of samples in the order
    /// they were taken (the reader's waits behind writers, ms): for the result file
    /// and pooled percentiles.
    pub samples: BTreeMap<(&'static str, Impl), Vec<Vec<f64>>>,
}

impl Results {
    /// Where one run of `imp` in `scenario` records its values.
    pub fn of(&mut self, scenario: &'static str, imp: Impl) -> Recorder<'_> {
        Recorder {
            results: self,
            scenario,
            imp,
        }
    }

    pub fn get(&self, scenario: &'static str, imp: Impl, name: &str) -> Option<&Metric> {
        self.metrics.get(&(scenario, imp, name.to_owned()))
    }

    pub fn median(&self, scenario: &'static str, imp: Impl, name: &str) -> f64 {
        self.get(scenario, imp, name)
            .map_or(f64::NAN, Metric::median)
    }
}

/// Records one run's values of one implementation in one scenario.
pub struct Recorder<'a> {
    results: &'a mut Results,
    scenario: &'static str,
    imp: Impl,
}

impl Recorder<'_> {
    /// This run's value of the metric `name`.
    pub fn put(&mut self, name: impl Into<String>, unit: &'static str, value: f64) {
        let key = (self.scenario, self.imp, name.into());
        let metric = self.results.metrics.entry(key).or_default();
        metric.unit = unit;
        metric.runs.push(value);
    }

    /// `{name}_p50`, `{name}_p99`... of `samples` for each of `ps` (`{name}_max`
    /// for 100).
    pub fn percentiles(&mut self, name: &str, unit: &'static str, samples: &mut [f64], ps: &[u32]) {
        for &p in ps {
            let metric = match p {
                100 => format!("{name}_max"),
                p => format!("{name}_p{p}"),
            };
            self.put(metric, unit, percentile(samples, f64::from(p)));
        }
    }
}
