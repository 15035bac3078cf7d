//! What the crate logs: the warnings about one lock, captured for a test.

use std::fmt;
use std::sync::{Mutex, Once, PoisonError};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Every warning logged in this test binary since the capture started, as
/// "<lock>: <message>" (the event's `lock` field).
static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Starts capturing warnings, on every thread (once per test binary: it installs
/// the global subscriber).
pub fn capture_warnings() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Capture))
            .expect("no other global subscriber in this test binary");
    });
}

/// The warnings logged so far about the lock named `lock`.
pub fn warnings_about(lock: &str) -> Vec<String> {
    let prefix = format!("{lock}: ");
    WARNINGS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|line| line.starts_with(&prefix))
        .cloned()
        .collect()
}

struct Capture;

impl<S: Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() != Level::WARN {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        WARNINGS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(format!("{}: {}", fields.lock, fields.message));
    }
}

/// The fields of an event that say which lock and what.
#[derive(Default)]
struct Fields {
    lock: String,
    message: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "lock" {
            self.lock = value.to_owned();
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "lock" => self.lock = format!("{value:?}").trim_matches('"').to_owned(),
            _ => {}
        }
    }
}
