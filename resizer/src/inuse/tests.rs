use csi_common::capabilities::VolumeExpansionCapability as Expansion;
use k8s_openapi::api::core::v1::{Container, PersistentVolumeClaimVolumeSource, PodStatus, Volume};
use serde_json::json;

use super::*;

fn pod(claims: &[&str], phase: Option<&str>) -> Pod {
    let volumes = claims
        .iter()
        .map(|claim| Volume {
            name: format!("v-{claim}"),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: (*claim).to_owned(),
                read_only: None,
            }),
            ..Volume::default()
        })
        .collect();
    Pod {
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                image: Some("busybox".into()),
                ..Container::default()
            }],
            volumes: Some(volumes),
            ..PodSpec::default()
        }),
        status: phase.map(|phase| PodStatus {
            phase: Some(phase.into()),
            ..PodStatus::default()
        }),
        ..Pod::default()
    }
}

#[test]
fn the_gate_follows_the_flag_and_the_expansion_capability() {
    let caps = |expansion: &[Expansion]| PluginCapabilities::from_values([], expansion.to_vec());
    let rows = [
        (true, &[Expansion::Offline][..], Gate::EveryCall),
        (true, &[Expansion::Online][..], Gate::AfterInUseError),
        (
            true,
            &[Expansion::Online, Expansion::Offline][..],
            Gate::AfterInUseError,
        ),
        (true, &[][..], Gate::AfterInUseError),
        (false, &[Expansion::Offline][..], Gate::Off),
        (false, &[][..], Gate::Off),
    ];
    for (handle, expansion, gate) in rows {
        assert_eq!(
            Gate::new(handle, &caps(expansion)),
            gate,
            "{handle} {expansion:?}"
        );
    }
}

#[test]
fn the_gate_applies_only_to_controller_calls_that_may_hit_a_used_volume() {
    // (gate, resizer, marked) -> check
    let rows = [
        (Gate::AfterInUseError, Resizer::Csi, false, false),
        (Gate::AfterInUseError, Resizer::Csi, true, true),
        (Gate::EveryCall, Resizer::Csi, false, true),
        (Gate::EveryCall, Resizer::Csi, true, true),
        (Gate::EveryCall, Resizer::Trivial, true, false),
        (Gate::AfterInUseError, Resizer::Trivial, true, false),
        (Gate::Off, Resizer::Csi, true, false),
        (Gate::Off, Resizer::Csi, false, false),
    ];
    for (gate, resizer, marked, check) in rows {
        assert_eq!(
            gate.must_check(resizer, marked),
            check,
            "{gate:?} {resizer:?} {marked}"
        );
    }
}

#[test]
fn a_running_or_pending_pod_uses_its_claims_and_a_terminated_one_does_not() {
    // (claims of the pod, phase) -> uses "data"
    let rows: [(&[&str], Option<&str>, bool); 8] = [
        (&["data"], Some("Running"), true),
        (&["data"], Some("Pending"), true),
        (&["data"], None, true),
        (&["logs", "data"], Some("Unknown"), true),
        (&["logs"], Some("Running"), false),
        (&["data"], Some("Succeeded"), false),
        (&["data"], Some("Failed"), false),
        (&[], Some("Running"), false),
    ];
    for (claims, phase, used) in rows {
        assert_eq!(
            uses(&pod(claims, phase), "data"),
            used,
            "{claims:?} {phase:?}"
        );
    }
}

#[test]
fn trimming_keeps_what_the_check_reads_and_drops_the_rest() {
    let mut full: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                     "labels": {"a": "b"}, "annotations": {"x": "y"}},
        "spec": {"containers": [{"name": "c", "image": "i"}],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
                             {"name": "t", "emptyDir": {}}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1"}
    }))
    .unwrap();
    trim(&mut full);
    assert_eq!(
        serde_json::to_value(&full).unwrap(),
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
            "spec": {"containers": [],
                     "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]},
            "status": {"phase": "Running"}
        })
    );
    assert!(uses(&full, "data"));
}

#[test]
fn the_event_message_is_upstreams() {
    assert_eq!(
        message("ns", "data", "d.csi"),
        "Unable to expand ns/data because CSI driver d.csi only supports offline expansion and volume is currently in-use"
    );
}
