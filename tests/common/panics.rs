//! Panics in background tasks, which fail no test by themselves.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many panics this test process has seen so far outside test code (in
/// the library, the driver, tokio or std), in any thread or task: a panic inside
/// a spawned background task fails no test by itself. Panics located in
/// `tests/` (failed assertions of tests running in parallel) are not counted.
/// The first call installs the counting hook; the default hook still prints.
pub fn panics_outside_tests() -> u64 {
    static PANICS: AtomicU64 = AtomicU64::new(0);
    static HOOK: OnceLock<()> = OnceLock::new();
    HOOK.get_or_init(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info
                .location()
                .is_some_and(|l| l.file().starts_with("tests/"))
            {
                PANICS.fetch_add(1, Ordering::SeqCst);
            }
            default(info);
        }));
    });
    PANICS.load(Ordering::SeqCst)
}
