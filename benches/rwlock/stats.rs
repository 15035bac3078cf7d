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
#[derive(Clone, Debug)]
pub struct Metric {
    pub scenario: &'static str,
    pub imp: Impl,
    pub name: &'static str,
    pub unit: &'static str,
    pub runs: Vec<f64>,
}

impl Metric {
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
    pub metrics: BTreeMap<(&'static str, Impl, &'static str), Metric>,
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
    pub fn record(
        &mut self,
        scenario: &'static str,
        imp: Impl,
        name: &'static str,
        unit: &'static str,
        value: f64,
    ) {
        self.metrics
            .entry((scenario, imp, name))
            .or_insert_with(|| Metric {
                scenario,
                imp,
                name,
                unit,
                runs: Vec::new(),
            })
            .runs
            .push(value);
    }

    pub fn get(&self, scenario: &str, imp: Impl, name: &str) -> Option<&Metric> {
        self.metrics
            .values()
            .find(|m| m.scenario == scenario && m.imp == imp && m.name == name)
    }

    pub fn median(&self, scenario: &str, imp: Impl, name: &str) -> f64 {
        self.get(scenario, imp, name)
            .map_or(f64::NAN, Metric::median)
    }
}
