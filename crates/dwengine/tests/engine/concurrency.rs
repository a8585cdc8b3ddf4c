//! Concurrent admissions from separate connections never exceed the limit.

use crate::common;

use std::sync::{Arc, Barrier};
use std::thread;

use dwengine::store::{Admission, Durability, SignalRequest, Store, StoreConfig};
use dwpolicy::LimitKind;

const THREADS: usize = 8;
const SIGNALS_PER_THREAD: usize = 12;
const LIMIT: u64 = 37;

#[test]
fn eight_writers_signalling_one_run_get_exactly_the_limit_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    let config = StoreConfig {
        durability: Durability::Normal,
        ..common::config(&[(LimitKind::PendingSignalCount, LIMIT)])
    };
    let run = {
        let mut store = Store::open(&path, config.clone()).unwrap();
        common::started(&mut store, "contended")
    };
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (path, config, barrier) = (path.clone(), config.clone(), Arc::clone(&barrier));
            thread::spawn(move || {
                // One connection per thread, as separate worker processes would have.
                let store = Store::open(&path, config).unwrap();
                barrier.wait();
                (0..SIGNALS_PER_THREAD)
                    .map(|i| {
                        let request = SignalRequest {
                            name: format!("t{t}-{i}"),
                            request_id: Some(format!("t{t}-{i}")),
                            ..SignalRequest::default()
                        };
                        store.signal(run, request).unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let outcomes: Vec<Admission> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();

    let accepted = outcomes.iter().filter(|o| !o.rejected()).count();
    assert_eq!(accepted as u64, LIMIT);
    assert_eq!(
        outcomes.len() - accepted,
        THREADS * SIGNALS_PER_THREAD - LIMIT as usize
    );
    for outcome in &outcomes {
        if let Admission::Rejected(r) = outcome {
            assert_eq!(r.reason, "structural_limit_exceeded");
            assert_eq!(r.structural_limit_kind, LimitKind::PendingSignalCount);
            assert_eq!(
                (r.structural_limit_value, r.structural_limit_configured),
                (LIMIT, LIMIT)
            );
        }
    }
    let store = Store::open(&path, config).unwrap();
    assert_eq!(store.pending_counts(run).unwrap().signals, LIMIT);
    let check = rusqlite::Connection::open(&path).unwrap();
    let rows: u64 = check
        .query_row(
            "SELECT COUNT(*) FROM signals WHERE run_id = ?1",
            [run.0],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(rows, LIMIT);
}
