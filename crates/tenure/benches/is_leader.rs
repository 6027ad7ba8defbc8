//! What `is_leader()` costs, side by side with the obvious alternatives a user
//! might write instead: reading the `watch` state, and a mutex-guarded flag.
//!
//! Run: `cargo bench -p tenure --bench is_leader`

use std::sync::{Arc, Mutex};
use std::time::Duration;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use tenure::store::memory::MemoryStore;
use tenure::{Elector, State};

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let elector = rt.block_on(async {
        let e = Elector::builder(Arc::new(MemoryStore::new()))
            .election("bench")
            .ttl(Duration::from_secs(60))
            .build()
            .expect("elector");
        e.acquired().await.expect("leader");
        e
    });
    assert!(elector.is_leader());
    let states = elector.leadership();
    let flag = Mutex::new(true);

    let mut g = c.benchmark_group("is_leader");
    g.bench_function(
        "Elector::is_leader (atomic deadline + CLOCK_BOOTTIME)",
        |b| b.iter(|| black_box(elector.is_leader())),
    );
    g.bench_function(
        "BootClock::now alone (the floor of any deadline check)",
        |b| {
            use tenure::clock::Clock;
            b.iter(|| black_box(tenure::clock::BootClock.now()))
        },
    );
    g.bench_function("watch::Receiver::borrow state (no deadline check)", |b| {
        b.iter(|| black_box(matches!(*states.borrow(), State::Leading { .. })))
    });
    g.bench_function("Mutex<bool> (no deadline check)", |b| {
        b.iter(|| black_box(*flag.lock().unwrap_or_else(|p| p.into_inner())))
    });
    g.finish();
    rt.block_on(elector.shutdown()).expect("shutdown");
}

criterion_group!(benches, bench);
criterion_main!(benches);
