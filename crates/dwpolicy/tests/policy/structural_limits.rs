//! Structural limits as the engine sees them: edges, warnings, logs and wire shapes.

use std::sync::{Arc, Mutex};

use dwpolicy::limits::{
    BackendCapabilities, BackendProfile, HealthSnapshot, LimitKind, Measure, RunRef,
    StructuralLimitExceeded, StructuralLimits, FAILURE_CATEGORY, WARNING_TARGET,
};

const RUN: RunRef<'static> = RunRef {
    workflow_run_id: "42",
    workflow_type: "App\\Workflows\\ImportOrders",
};

#[test]
fn every_kind_passes_below_and_fails_at_or_above_its_limit() {
    let limits = StructuralLimits::default();
    for kind in LimitKind::ALL {
        let limit = kind.default_limit();
        assert_eq!(limits.get(kind), limit);
        assert!(limits.check(kind, 0, &RUN).is_ok(), "{kind} at 0");
        assert!(limits.check(kind, limit - 1, &RUN).is_ok(), "{kind} below");
        let at = limits.check(kind, limit, &RUN);
        let above = limits.check(kind, limit + 1, &RUN);
        assert_eq!(
            above,
            Err(StructuralLimitExceeded {
                kind,
                value: limit + 1,
                configured: limit
            }),
            "{kind} above"
        );
        match kind.measure() {
            // Counts are checked before adding one more: reaching the limit is already too many.
            Measure::Count => assert_eq!(
                at,
                Err(StructuralLimitExceeded {
                    kind,
                    value: limit,
                    configured: limit
                }),
                "{kind} at"
            ),
            // A batch is counted whole before it is scheduled: exactly the limit
            // fits (the reference's `batchSize > limit`), at 100% utilization.
            Measure::Batch => {
                let warning = at.expect("a batch of exactly the limit passes");
                let warning = warning.expect("and warns at 100%");
                assert_eq!((warning.current, warning.utilization_percent), (limit, 100));
            }
            // Sizes are checked on the finished encoding: exactly the limit fits.
            Measure::Size => assert_eq!(at, Ok(None), "{kind} at"),
        }
    }
}

#[test]
fn zero_disables_a_limit_and_its_warning() {
    for kind in LimitKind::ALL {
        let mut limits = StructuralLimits::default();
        limits.set(kind, 0);
        assert_eq!(limits.check(kind, u64::MAX, &RUN), Ok(None), "{kind}");
        // The other kinds stay in force.
        for other in LimitKind::ALL.into_iter().filter(|k| *k != kind) {
            assert!(limits.check(other, u64::MAX, &RUN).is_err(), "{other}");
        }
    }
}

#[test]
fn warning_edge_at_eighty_percent_of_two_thousand() {
    let limits = StructuralLimits::default();
    let kind = LimitKind::PendingActivityCount;
    assert_eq!(limits.check(kind, 1599, &RUN), Ok(None));
    let at = limits
        .check(kind, 1600, &RUN)
        .unwrap()
        .expect("warns at 1600");
    assert_eq!(
        (at.current, at.limit, at.utilization_percent),
        (1600, 2000, 80)
    );
    let past = limits
        .check(kind, 1601, &RUN)
        .unwrap()
        .expect("warns at 1601");
    // 80.05% is floored, never rounded up past what was measured.
    assert_eq!(past.utilization_percent, 80);
    let last = limits
        .check(kind, 1999, &RUN)
        .unwrap()
        .expect("warns at 1999");
    assert_eq!(last.utilization_percent, 99);
}

#[test]
fn every_count_kind_warns_at_its_threshold_and_size_kinds_never_do() {
    let limits = StructuralLimits::default();
    for kind in LimitKind::ALL {
        let limit = kind.default_limit();
        let edge = limit * 80 / 100;
        let warned = |value| limits.check(kind, value, &RUN).unwrap().is_some();
        match kind.measure() {
            Measure::Count | Measure::Batch => {
                assert!(!warned(edge - 1), "{kind} below edge");
                assert!(warned(edge), "{kind} at edge");
                assert!(warned(limit - 1), "{kind} just below limit");
            }
            Measure::Size => assert!(!warned(limit), "{kind}"),
        }
    }
}

#[test]
fn threshold_zero_disables_warnings_and_other_thresholds_move_the_edge() {
    let off = StructuralLimits {
        warning_threshold_percent: 0,
        ..StructuralLimits::default()
    };
    let kind = LimitKind::PendingSignalCount;
    assert_eq!(off.check(kind, 4999, &RUN), Ok(None));
    assert!(off.check(kind, 5000, &RUN).is_err());

    let half = StructuralLimits {
        warning_threshold_percent: 50,
        ..StructuralLimits::default()
    };
    assert_eq!(half.check(kind, 2499, &RUN), Ok(None));
    assert!(half.check(kind, 2500, &RUN).unwrap().is_some());

    // Past 100 the threshold is clamped, and at 100 a count fails before it could warn.
    let over = StructuralLimits {
        warning_threshold_percent: 250,
        ..StructuralLimits::default()
    };
    assert_eq!(over.warning_threshold(), 100);
    assert_eq!(over.check(kind, 4999, &RUN), Ok(None));
}

#[test]
fn huge_values_do_not_overflow() {
    let limits = StructuralLimits {
        pending_activity_count: u64::MAX,
        ..StructuralLimits::default()
    };
    let warning = limits
        .check(LimitKind::PendingActivityCount, u64::MAX - 1, &RUN)
        .unwrap()
        .expect("warns just below u64::MAX");
    assert_eq!(warning.utilization_percent, 99);
}

#[test]
fn warning_message_has_the_seed_wording() {
    let limits = StructuralLimits::default();
    let warning = limits
        .check(LimitKind::PendingActivityCount, 1620, &RUN)
        .unwrap()
        .unwrap();
    assert_eq!(
        warning.message(),
        "[Durable Workflow] Run 42 approaching structural limit [pending_activity_count]: 1620 / 2000 (81% utilization, warning at 80%)."
    );
    assert_eq!(warning.workflow_type, "App\\Workflows\\ImportOrders");
}

#[test]
fn exceeded_failure_has_a_stable_serde_form() {
    let error = StructuralLimits::default()
        .check(LimitKind::CommandBatchSize, 1001, &RUN)
        .unwrap_err();
    assert_eq!(error.failure_category(), FAILURE_CATEGORY);
    assert_eq!(
        error.to_string(),
        "structural limit [command_batch_size] exceeded: 1001 / 1000"
    );
    insta::assert_json_snapshot!("exceeded_command_batch_size", error);
    let json = serde_json::to_value(error).unwrap();
    let back: StructuralLimitExceeded = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, error);
    let mut wrong = json;
    wrong["failure_category"] = "timeout".into();
    assert!(serde_json::from_value::<StructuralLimitExceeded>(wrong).is_err());
}

#[test]
fn approaching_limit_serializes_its_structured_context() {
    let warning = StructuralLimits::default()
        .check(LimitKind::PendingActivityCount, 1620, &RUN)
        .unwrap()
        .unwrap();
    insta::assert_json_snapshot!("approaching_pending_activity_count", warning);
}

#[test]
fn health_snapshot_lists_every_limit() {
    insta::assert_json_snapshot!(
        "health_snapshot_defaults",
        HealthSnapshot::new(StructuralLimits::default())
    );
}

#[test]
fn backend_capabilities_for_sqs() {
    let caps = BackendCapabilities::new(
        StructuralLimits::default(),
        BackendProfile {
            queue_driver: "sqs",
            database_driver: "mysql",
        },
    );
    // A struct, not `json!`, so the snapshot keeps the contract's key order.
    #[derive(serde::Serialize)]
    struct Section<'a> {
        structural_limits: &'a BackendCapabilities,
    }
    insta::assert_json_snapshot!(
        "backend_capabilities_sqs",
        Section {
            structural_limits: &caps
        }
    );
}

#[test]
fn backend_capabilities_for_sqlite_and_for_a_plain_backend() {
    let sqlite = BackendCapabilities::new(
        StructuralLimits::default(),
        BackendProfile {
            queue_driver: "redis",
            database_driver: "sqlite",
        },
    );
    insta::assert_json_snapshot!("backend_capabilities_sqlite", sqlite);
    let plain = BackendCapabilities::new(
        StructuralLimits::default(),
        BackendProfile {
            queue_driver: "redis",
            database_driver: "pgsql",
        },
    );
    let json = serde_json::to_value(&plain).unwrap();
    assert_eq!(json["backend_adjustments"], serde_json::json!({}));
    assert_eq!(json["issues"], serde_json::json!([]));
    assert_eq!(json["effective"], json["configured"]);
}

/// A minimal subscriber that records WARN events and their fields, so the
/// test needs no extra dependency to observe what `tracing` receives.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Fields>>>);

type Fields = Vec<(String, String)>;

struct FieldVisitor<'a>(&'a mut Vec<(String, String)>);

impl tracing::field::Visit for FieldVisitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.0.push((field.name().to_owned(), value.to_string()));
    }
}

impl tracing::Subscriber for Recorder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let meta = event.metadata();
        let mut fields = vec![
            ("level".to_owned(), meta.level().to_string()),
            ("target".to_owned(), meta.target().to_owned()),
        ];
        event.record(&mut FieldVisitor(&mut fields));
        self.0.lock().unwrap().push(fields);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn check_and_warn_emits_one_structured_tracing_event() {
    let recorder = Recorder::default();
    let limits = StructuralLimits::default();
    tracing::subscriber::with_default(recorder.clone(), || {
        assert_eq!(
            limits.check_and_warn(LimitKind::PendingActivityCount, 1599, &RUN),
            Ok(None)
        );
        let warning = limits
            .check_and_warn(LimitKind::PendingActivityCount, 1620, &RUN)
            .unwrap();
        assert!(warning.is_some());
        assert!(limits
            .check_and_warn(LimitKind::PendingActivityCount, 2000, &RUN)
            .is_err());
    });
    let events = recorder.0.lock().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    let field = |name: &str| {
        events[0]
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no field {name} in {:?}", events[0]))
    };
    assert_eq!(field("level"), "WARN");
    assert_eq!(field("target"), WARNING_TARGET);
    assert_eq!(field("workflow_run_id"), "42");
    assert_eq!(field("workflow_type"), "App\\Workflows\\ImportOrders");
    assert_eq!(field("limit_kind"), "pending_activity_count");
    assert_eq!(field("current"), "1620");
    assert_eq!(field("limit"), "2000");
    assert_eq!(field("utilization_percent"), "81");
    assert_eq!(field("warning_threshold_percent"), "80");
    assert_eq!(
        field("message"),
        "[Durable Workflow] Run 42 approaching structural limit [pending_activity_count]: 1620 / 2000 (81% utilization, warning at 80%)."
    );
}
