//! A `metrics` recorder of the tests' own: every series as
//! `name{label="value",...}` → value (gauges keep the last value, counters
//! the total, histograms the number of samples).
//!
//! Installed process-wide ([`TestRecorder::install_global`]) it sees what
//! electors and the HTTP API record. Scoped to a store's construction
//! ([`TestRecorder::scope`], [`TestRecorder::scope_sync`]) it sees that
//! store's own counters (`tenure_store_statements_total`) for the store's
//! whole life, and nothing of other stores in the same test binary: a store
//! registers its counters when it is built, with the recorder current then.
//!
//! ```no_run
//! # async fn f() {
//! use tenure_testsupport::metrics::TestRecorder;
//! let recorder = TestRecorder::new();
//! let store = recorder
//!     .scope(tenure::store::connect("sqlite:///tmp/t.db", &Default::default()))
//!     .await
//!     .unwrap();
//! // ... use the store ...
//! let renewals = recorder.statements("renew");
//! # }
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// Series name → value.
pub type Values = Arc<Mutex<BTreeMap<String, f64>>>;

/// One series: gauges keep the last value, counters the total, histograms
/// the number of samples.
struct Series {
    name: String,
    values: Values,
}

impl Series {
    fn update(&self, f: impl FnOnce(f64) -> f64) {
        let mut v = self.values.lock().unwrap_or_else(|p| p.into_inner());
        let x = v.entry(self.name.clone()).or_insert(0.0);
        *x = f(*x);
    }
}

impl GaugeFn for Series {
    fn increment(&self, by: f64) {
        self.update(|x| x + by);
    }
    fn decrement(&self, by: f64) {
        self.update(|x| x - by);
    }
    fn set(&self, to: f64) {
        self.update(|_| to);
    }
}

impl CounterFn for Series {
    fn increment(&self, by: u64) {
        self.update(|x| x + by as f64);
    }
    fn absolute(&self, to: u64) {
        self.update(|_| to as f64);
    }
}

impl HistogramFn for Series {
    fn record(&self, _: f64) {
        self.update(|x| x + 1.0);
    }
}

/// Records every series as `name{label="value",...}` → value.
#[derive(Clone, Default)]
pub struct TestRecorder {
    values: Values,
}

impl std::fmt::Debug for TestRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TestRecorder").field(&self.values()).finish()
    }
}

impl TestRecorder {
    /// An empty recorder, not installed anywhere yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Installs this recorder for the whole process (the facade takes one per
    /// process: panics if another is installed) and returns its values.
    pub fn install_global(self) -> Values {
        let values = Arc::clone(&self.values);
        metrics::set_global_recorder(self).expect("no other recorder in this test binary");
        values
    }

    /// Runs `f` with this recorder as the current one whenever `f` is polled,
    /// e.g. a store's `connect`: what `f` registers records here.
    pub async fn scope<F: Future>(&self, f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        std::future::poll_fn(|cx| metrics::with_local_recorder(self, || f.as_mut().poll(cx))).await
    }

    /// Runs `f` with this recorder as the current one, e.g. a memory store's
    /// constructor.
    pub fn scope_sync<T>(&self, f: impl FnOnce() -> T) -> T {
        metrics::with_local_recorder(self, f)
    }

    /// Every series recorded so far.
    pub fn values(&self) -> BTreeMap<String, f64> {
        self.values
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// One series, by its full name (`name{label="value",...}`).
    pub fn value(&self, series: &str) -> Option<f64> {
        self.values
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(series)
            .copied()
    }

    /// The `tenure_store_statements_total` counters of `statement` summed over
    /// stores: the calls of that kind the stores built in this recorder's
    /// scope sent (0 when none was registered).
    pub fn statements(&self, statement: &str) -> u64 {
        let label = format!("statement=\"{statement}\"");
        self.values
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(name, _)| {
                name.starts_with("tenure_store_statements_total{")
                    && name
                        .trim_end_matches('}')
                        .split([',', '{'])
                        .any(|l| l == label)
            })
            .map(|(_, v)| *v as u64)
            .sum()
    }

    fn series(&self, key: &Key) -> Arc<Series> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}=\"{}\"", l.key(), l.value()))
            .collect();
        Arc::new(Series {
            name: format!("{}{{{}}}", key.name(), labels.join(",")),
            values: Arc::clone(&self.values),
        })
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.series(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.series(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.series(key))
    }
}
